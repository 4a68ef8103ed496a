package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/target"
)

// controllerSnapshot is what the target reports of a controller.
type controllerSnapshot = target.ControllerInfo

// method is one API method: it decodes its params and returns its result.
type method func(s *Service, params json.RawMessage) (any, *Error)

// typed makes a method of f, which takes its params decoded (unknown
// members refused: a typo must not be ignored).
func typed[P any](f func(s *Service, q *P) (any, *Error)) method {
	return func(s *Service, params json.RawMessage) (any, *Error) {
		var q P
		if err := decodeParams(params, &q); err != nil {
			return nil, err
		}
		return f(s, &q)
	}
}

// noParams are the params of the methods that take none.
type noParams struct{}

// methods by name; docs/control-api.md documents each.
var methods map[string]method

func init() {
	methods = map[string]method{
		"rpc.methods": func(*Service, json.RawMessage) (any, *Error) { return Methods(), nil },

		"config.save":   typed((*Service).configSave),
		"config.reload": typed((*Service).configReload),

		"port.list":      typed((*Service).portList),
		"port.add":       typed((*Service).portAdd),
		"port.modify":    typed((*Service).portModify),
		"port.del":       typed((*Service).portDel),
		"port.link":      typed(func(s *Service, q *LinkParams) (any, *Error) { return s.link(q, true) }),
		"port.unlink":    typed(func(s *Service, q *LinkParams) (any, *Error) { return s.link(q, false) }),
		"port.ana_state": typed((*Service).portANAState),
		"port.stats":     typed((*Service).portStats),

		"subsystem.list":   typed((*Service).subsystemList),
		"subsystem.add":    typed((*Service).subsystemAdd),
		"subsystem.modify": typed((*Service).subsystemModify),
		"subsystem.del":    typed((*Service).subsystemDel),

		"ns.list":    typed((*Service).nsList),
		"ns.add":     typed((*Service).nsAdd),
		"ns.modify":  typed((*Service).nsModify),
		"ns.del":     typed((*Service).nsDel),
		"ns.resize":  typed((*Service).nsResize),
		"ns.enable":  typed(func(s *Service, q *NSParams) (any, *Error) { return s.nsEnable(q, true) }),
		"ns.disable": typed(func(s *Service, q *NSParams) (any, *Error) { return s.nsEnable(q, false) }),

		"host.list":       typed((*Service).hostList),
		"host.add":        typed((*Service).hostAdd),
		"host.modify":     typed((*Service).hostModify),
		"host.del":        typed((*Service).hostDel),
		"host.allow":      typed(func(s *Service, q *AllowParams) (any, *Error) { return s.allow(q, true) }),
		"host.disallow":   typed(func(s *Service, q *AllowParams) (any, *Error) { return s.allow(q, false) }),
		"ctrl.list":       typed((*Service).ctrlList),
		"ctrl.disconnect": typed((*Service).ctrlDisconnect),
	}
}

// Methods returns the names of the API's methods, sorted.
func Methods() []string {
	names := make([]string, 0, len(methods))
	for n := range methods {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// call runs one method.
func (s *Service) call(name string, params json.RawMessage) (result any, rerr *Error) {
	m, ok := methods[name]
	if !ok {
		return nil, errorf(CodeMethodNotFound, "method not found: %q (rpc.methods lists them)", name)
	}
	defer func() {
		// A bug in a method must not take the daemon down.
		if r := recover(); r != nil {
			s.log.Error("control method panicked", "method", name, "panic", r)
			result, rerr = nil, errorf(CodeInternal, "internal error in %s: %v", name, r)
		}
	}()
	result, rerr = m(s, params)
	if rerr != nil {
		s.log.Info("control request refused", "method", name, "code", rerr.Code, "error", rerr.Message)
	} else if name != "rpc.methods" && !isList(name) {
		s.log.Info("control request done", "method", name)
	}
	return result, rerr
}

func isList(name string) bool {
	return strings.HasSuffix(name, ".list") || name == "port.stats" || name == "config.save"
}

// result is what a changing method answers once its change is applied,
// read from the configuration then running.
type result func() (any, *Error)

// deleted is the result of the del methods.
func deleted() (any, *Error) { return true, nil }

// then applies edit to a copy of the running configuration (s.change:
// validated, then applied all or nothing) and answers with res, read
// before another change can run: the answer describes what was applied.
func (s *Service) then(edit func(t *configfs.Tree) error, res result) (any, *Error) {
	out, err := s.change(edit, res)
	if s.testHookChanged != nil {
		s.testHookChanged()
	}
	return out, err
}

// required refuses an empty key member.
func required(name, v string) *Error {
	if v == "" {
		return invalidParams("%s is required", name)
	}
	return nil
}

// The lookups of the edits: the object of t the key names, or the
// not-found error to answer.

func findPort(t *configfs.Tree, id string) (*configfs.Port, error) {
	if p := t.Port(id); p != nil {
		return p, nil
	}
	return nil, notFound("port %q does not exist", id)
}

func findSubsystem(t *configfs.Tree, nqn string) (*configfs.Subsystem, error) {
	if ss := t.Subsystem(nqn); ss != nil {
		return ss, nil
	}
	return nil, notFound("subsystem %q does not exist", nqn)
}

func findHost(t *configfs.Tree, nqn string) (*configfs.Host, error) {
	if h := t.Host(nqn); h != nil {
		return h, nil
	}
	return nil, notFound("host %q does not exist", nqn)
}

// findSubsystems checks that every subsystem of nqns exists.
func findSubsystems(t *configfs.Tree, nqns []string) error {
	for _, nqn := range nqns {
		if _, err := findSubsystem(t, nqn); err != nil {
			return err
		}
	}
	return nil
}

// --- ports ---

// IDParams name a port.
type IDParams struct {
	ID    string `json:"id"`
	Force bool   `json:"force,omitempty"`
}

// LinkParams name a port and a subsystem.
type LinkParams struct {
	ID  string `json:"id"`
	NQN string `json:"nqn"`
}

func (s *Service) portList(*noParams) (any, *Error) {
	tree := s.Tree()
	ids := tree.PortIDs()
	out := []Port{}
	for _, p := range tree.Ports {
		out = append(out, portInfo(p, ids[p.ID]))
	}
	return out, nil
}

func (s *Service) portResult(id string) result {
	return func() (any, *Error) {
		tree := s.Tree()
		if p := tree.Port(id); p != nil {
			return portInfo(p, tree.PortIDs()[id]), nil
		}
		return nil, notFound("port %q is gone", id)
	}
}

func (s *Service) portAdd(q *Port) (any, *Error) {
	if err := required("id", q.ID); err != nil {
		return nil, err
	}
	return s.then(func(t *configfs.Tree) error {
		if t.Port(q.ID) != nil {
			return exists("port %q exists", q.ID)
		}
		p := configfs.NewPort(q.ID)
		if err := setPort(p, q); err != nil {
			return err
		}
		if err := findSubsystems(t, q.Subsystems); err != nil {
			return err
		}
		p.Subsystems = slices.Clone(q.Subsystems)
		t.Ports = append(t.Ports, p)
		return nil
	}, s.portResult(q.ID))
}

func (s *Service) portModify(q *Port) (any, *Error) {
	if err := required("id", q.ID); err != nil {
		return nil, err
	}
	return s.then(func(t *configfs.Tree) error {
		p, err := findPort(t, q.ID)
		if err != nil {
			return err
		}
		if err := setPort(p, q); err != nil {
			return err
		}
		if q.Subsystems != nil {
			if err := findSubsystems(t, q.Subsystems); err != nil {
				return err
			}
			p.Subsystems = slices.Clone(q.Subsystems)
		}
		return nil
	}, s.portResult(q.ID))
}

// portANAState sets a port's state of one ANA group (Linux:
// ports/<id>/ana_groups/<grpid>/ana_state); hosts connected through the
// port get an ANA Change event.
func (s *Service) portANAState(q *ANAStateParams) (any, *Error) {
	if err := required("id", q.ID); err != nil {
		return nil, err
	}
	if q.GrpID == 0 || q.GrpID > configfs.MaxANAGroups {
		return nil, invalidParams("grpid %d: ANA groups are 1 to %d", q.GrpID, configfs.MaxANAGroups)
	}
	if !slices.Contains(configfs.ANAStates, q.State) {
		return nil, invalidParams("state %q: want one of %s", q.State, strings.Join(configfs.ANAStates, ", "))
	}
	return s.then(func(t *configfs.Tree) error {
		p, err := findPort(t, q.ID)
		if err != nil {
			return err
		}
		setANAState(p, q.GrpID, q.State)
		return nil
	}, s.portResult(q.ID))
}

func (s *Service) portDel(q *IDParams) (any, *Error) {
	return s.then(func(t *configfs.Tree) error {
		p, err := findPort(t, q.ID)
		if err != nil {
			return err
		}
		if n := s.controllersOn(q.ID, ""); n > 0 && !q.Force {
			return refused("port %q has %d connected controllers: disconnecting them needs force", q.ID, n)
		}
		t.Ports = slices.DeleteFunc(t.Ports, func(x *configfs.Port) bool { return x == p })
		return nil
	}, deleted)
}

// link makes port q.ID export subsystem q.NQN (on), or stop exporting it.
func (s *Service) link(q *LinkParams, on bool) (any, *Error) {
	return s.then(func(t *configfs.Tree) error {
		p, err := findPort(t, q.ID)
		if err != nil {
			return err
		}
		if _, err := findSubsystem(t, q.NQN); err != nil {
			return err
		}
		i := slices.Index(p.Subsystems, q.NQN)
		switch {
		case on && i >= 0:
			return exists("port %q exports %s already", q.ID, q.NQN)
		case on:
			p.Subsystems = append(p.Subsystems, q.NQN)
		case i < 0:
			return notFound("port %q does not export %s", q.ID, q.NQN)
		default:
			p.Subsystems = slices.Delete(p.Subsystems, i, i+1)
		}
		return nil
	}, s.portResult(q.ID))
}

// controllersOn counts the controllers connected through port (any when
// "") to subsystem nqn (any when "").
func (s *Service) controllersOn(port, nqn string) int {
	n := 0
	for _, c := range s.srv.Target.Controllers() {
		if (port == "" || c.Port == port) && (nqn == "" || c.Subsystem == nqn) && !c.Discovery {
			n++
		}
	}
	return n
}

func refused(format string, args ...any) *Error {
	return &Error{Code: CodeRefused, Message: fmt.Sprintf(format, args...)}
}

// --- subsystems ---

// NQNParams name a subsystem (or a host).
type NQNParams struct {
	NQN   string `json:"nqn"`
	Force bool   `json:"force,omitempty"`
}

// filterParams are the params of the list methods that take a subsystem
// NQN to list only its objects.
type filterParams struct {
	NQN string `json:"nqn,omitempty"`
}

func (s *Service) subsystemList(q *filterParams) (any, *Error) {
	tree := s.Tree()
	out := []Subsystem{}
	for _, ss := range tree.Subsystems {
		if q.NQN == "" || ss.NQN == q.NQN {
			out = append(out, subsystemInfo(tree, ss))
		}
	}
	if q.NQN != "" && len(out) == 0 {
		return nil, notFound("subsystem %q does not exist", q.NQN)
	}
	return out, nil
}

func (s *Service) subsystemResult(nqn string) result {
	return func() (any, *Error) {
		tree := s.Tree()
		if ss := tree.Subsystem(nqn); ss != nil {
			return subsystemInfo(tree, ss), nil
		}
		return nil, notFound("subsystem %q is gone", nqn)
	}
}

// setPorts makes exactly ports export subsystem nqn.
func setPorts(t *configfs.Tree, nqn string, ports []string) error {
	for _, id := range ports {
		if _, err := findPort(t, id); err != nil {
			return err
		}
	}
	for _, p := range t.Ports {
		i := slices.Index(p.Subsystems, nqn)
		want := slices.Contains(ports, p.ID)
		switch {
		case want && i < 0:
			p.Subsystems = append(p.Subsystems, nqn)
		case !want && i >= 0:
			p.Subsystems = slices.Delete(p.Subsystems, i, i+1)
		}
	}
	return nil
}

// ensureHosts adds a host entry for every NQN of hosts the tree lacks, as
// the HCL loader does for allowed_hosts.
func ensureHosts(t *configfs.Tree, hosts []string) {
	for _, h := range hosts {
		if t.Host(h) == nil {
			t.Hosts = append(t.Hosts, &configfs.Host{NQN: h})
		}
	}
}

func (s *Service) subsystemAdd(q *Subsystem) (any, *Error) {
	if err := required("nqn", q.NQN); err != nil {
		return nil, err
	}
	if q.Namespaces != nil {
		return nil, invalidParams("namespaces: add them with ns.add")
	}
	return s.then(func(t *configfs.Tree) error {
		if t.Subsystem(q.NQN) != nil {
			return exists("subsystem %q exists", q.NQN)
		}
		ss := configfs.NewSubsystem(q.NQN)
		setSubsystem(ss, q)
		ensureHosts(t, ss.AllowedHosts)
		t.Subsystems = append(t.Subsystems, ss)
		return setPorts(t, q.NQN, q.Ports)
	}, s.subsystemResult(q.NQN))
}

func (s *Service) subsystemModify(q *Subsystem) (any, *Error) {
	if q.Namespaces != nil {
		return nil, invalidParams("namespaces: change them with the ns methods")
	}
	return s.then(func(t *configfs.Tree) error {
		ss, err := findSubsystem(t, q.NQN)
		if err != nil {
			return err
		}
		setSubsystem(ss, q)
		ensureHosts(t, ss.AllowedHosts)
		if q.Ports != nil {
			return setPorts(t, q.NQN, q.Ports)
		}
		return nil
	}, s.subsystemResult(q.NQN))
}

func (s *Service) subsystemDel(q *NQNParams) (any, *Error) {
	return s.then(func(t *configfs.Tree) error {
		ss, err := findSubsystem(t, q.NQN)
		if err != nil {
			return err
		}
		if n := s.controllersOn("", q.NQN); n > 0 && !q.Force {
			return refused("subsystem %q has %d connected controllers: disconnecting them needs force", q.NQN, n)
		}
		t.Subsystems = slices.DeleteFunc(t.Subsystems, func(x *configfs.Subsystem) bool { return x == ss })
		return setPorts(t, q.NQN, nil)
	}, deleted)
}

// --- namespaces ---

// NSParams name a namespace.
type NSParams struct {
	NQN   string `json:"nqn"`
	NSID  uint32 `json:"nsid"`
	Force bool   `json:"force,omitempty"`
}

// ResizeParams are ns.resize's params.
type ResizeParams struct {
	NQN  string `json:"nqn"`
	NSID uint32 `json:"nsid"`
	// Size is the new size; omitted for a block device, the device's size
	// is read again (after the device was resized).
	Size *Size `json:"size,omitempty"`
	// Force allows shrinking a memory namespace, which creates it again
	// empty (growing one keeps its data, in place).
	Force bool `json:"force,omitempty"`
}

func (s *Service) nsList(q *filterParams) (any, *Error) {
	tree := s.Tree()
	out := []Namespace{}
	for _, ss := range tree.Subsystems {
		if q.NQN != "" && ss.NQN != q.NQN {
			continue
		}
		for _, ns := range ss.Namespaces {
			out = append(out, namespaceInfo(ss.NQN, ns))
		}
	}
	if q.NQN != "" && tree.Subsystem(q.NQN) == nil {
		return nil, notFound("subsystem %q does not exist", q.NQN)
	}
	return out, nil
}

// nsResult answers with namespace *nsid of nqn: a pointer, as ns.add
// picks the NSID in its edit.
func (s *Service) nsResult(nqn string, nsid *uint32) result {
	return func() (any, *Error) {
		if ss := s.Tree().Subsystem(nqn); ss != nil {
			if ns := ss.Namespace(*nsid); ns != nil {
				return namespaceInfo(nqn, ns), nil
			}
		}
		return nil, notFound("namespace %d of %s is gone", *nsid, nqn)
	}
}

// lookupNS returns namespace nsid of subsystem nqn in t.
func lookupNS(t *configfs.Tree, nqn string, nsid uint32) (*configfs.Subsystem, *configfs.Namespace, error) {
	ss, err := findSubsystem(t, nqn)
	if err != nil {
		return nil, nil, err
	}
	ns := ss.Namespace(nsid)
	if ns == nil {
		return ss, nil, notFound("subsystem %s has no namespace %d", nqn, nsid)
	}
	return ss, ns, nil
}

// editNS applies edit to namespace nsid of nqn and answers with it.
func (s *Service) editNS(nqn string, nsid uint32, edit func(ns *configfs.Namespace) error) (any, *Error) {
	return s.then(func(t *configfs.Tree) error {
		_, ns, err := lookupNS(t, nqn, nsid)
		if err != nil {
			return err
		}
		return edit(ns)
	}, s.nsResult(nqn, &nsid))
}

// checkPath refuses relative backend paths: the daemon's working
// directory is not the client's.
func checkPath(q *Namespace) *Error {
	for _, p := range []struct {
		name string
		v    *string
	}{{"path", q.Path}, {"ceph_conf", q.CephConf}, {"keyring", q.Keyring}} {
		if p.v != nil && *p.v != "" && !filepath.IsAbs(*p.v) {
			return invalidParams("%s %q: give an absolute path (the daemon's working directory is not the client's)", p.name, *p.v)
		}
	}
	return nil
}

func (s *Service) nsAdd(q *Namespace) (any, *Error) {
	if err := checkPath(q); err != nil {
		return nil, err
	}
	nsid := q.NSID
	return s.then(func(t *configfs.Tree) error {
		ss, err := findSubsystem(t, q.NQN)
		if err != nil {
			return err
		}
		if nsid == 0 { // the lowest free
			for nsid = 1; ss.Namespace(nsid) != nil; nsid++ {
			}
		}
		if ss.Namespace(nsid) != nil {
			return exists("subsystem %s has namespace %d already", q.NQN, nsid)
		}
		ns := configfs.NewNamespace(nsid)
		if err := setNamespace(ns, q); err != nil {
			return err
		}
		if ns.Backend == "" && ns.DevicePath != "" {
			ns.Backend = configfs.InferBackend(ns.DevicePath)
		}
		ss.Namespaces = append(ss.Namespaces, ns)
		return nil
	}, s.nsResult(q.NQN, &nsid))
}

func (s *Service) nsModify(q *Namespace) (any, *Error) {
	if err := checkPath(q); err != nil {
		return nil, err
	}
	return s.editNS(q.NQN, q.NSID, func(ns *configfs.Namespace) error {
		if err := setNamespace(ns, q); err != nil {
			return err
		}
		return nil
	})
}

func (s *Service) nsDel(q *NSParams) (any, *Error) {
	return s.then(func(t *configfs.Tree) error {
		ss, _, err := lookupNS(t, q.NQN, q.NSID)
		if err != nil {
			return err
		}
		ss.Namespaces = slices.DeleteFunc(ss.Namespaces, func(ns *configfs.Namespace) bool { return ns.NSID == q.NSID })
		return nil
	}, deleted)
}

func (s *Service) nsEnable(q *NSParams, on bool) (any, *Error) {
	return s.editNS(q.NQN, q.NSID, func(ns *configfs.Namespace) error {
		ns.Enable = on
		return nil
	})
}

func (s *Service) nsResize(q *ResizeParams) (any, *Error) {
	if q.Size == nil {
		return s.nsRescan(q)
	}
	size := int64(*q.Size)
	return s.editNS(q.NQN, q.NSID, func(ns *configfs.Namespace) error {
		switch {
		case size <= 0:
			return invalidParams("size must be positive")
		case ns.Backend == configfs.BackendMemory && !q.Force && size < ns.Size:
			return refused("shrinking memory namespace %d of %s recreates it empty: its data is lost; force to do it", q.NSID, q.NQN)
		case ns.Backend == configfs.BackendFile:
			ns.Grow = ns.Grow || size > ns.Size
		}
		ns.Size = size
		return nil
	})
}

// nsRescan reads the size of a file or block namespace without a
// configured size from its backend again; hosts get a Namespace Attribute
// Changed event. The configuration does not change: no Apply, and no
// unsaved change counted. Serialized with the changes and reloads (s.mu),
// so the namespace checked is the one revalidated.
func (s *Service) nsRescan(q *ResizeParams) (any, *Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.applied {
		return nil, errNotStarted()
	}
	_, ns, err := lookupNS(s.Tree(), q.NQN, q.NSID)
	if err != nil {
		return nil, asError(err)
	}
	if ns.Backend != configfs.BackendBlock && ns.Backend != configfs.BackendFile || ns.Size != 0 {
		return nil, invalidParams("size is required (only a file or block namespace without a configured size takes its size from the backend again)")
	}
	if err := s.srv.Reconciler.RevalidateNamespace(q.NQN, q.NSID); err != nil {
		return nil, errorf(CodeNotApplied, "%v", err)
	}
	return s.nsResult(q.NQN, &q.NSID)()
}

// --- hosts ---

// AllowParams name a subsystem and a host.
type AllowParams struct {
	NQN  string `json:"nqn"`
	Host string `json:"host"`
}

func (s *Service) hostList(*noParams) (any, *Error) {
	tree := s.Tree()
	out := []Host{}
	for _, h := range tree.Hosts {
		out = append(out, hostInfo(tree, h))
	}
	// By NQN: a host the configuration declares only in allowed_hosts
	// comes after the declared ones once saved and loaded again.
	slices.SortFunc(out, func(a, b Host) int { return strings.Compare(a.NQN, b.NQN) })
	return out, nil
}

func (s *Service) hostResult(nqn string) result {
	return func() (any, *Error) {
		tree := s.Tree()
		if h := tree.Host(nqn); h != nil {
			return hostInfo(tree, h), nil
		}
		return nil, notFound("host %q is gone", nqn)
	}
}

func (s *Service) hostAdd(q *Host) (any, *Error) {
	if err := required("nqn", q.NQN); err != nil {
		return nil, err
	}
	return s.then(func(t *configfs.Tree) error {
		if t.Host(q.NQN) != nil {
			return exists("host %q exists", q.NQN)
		}
		h := &configfs.Host{NQN: q.NQN}
		setHost(h, q)
		t.Hosts = append(t.Hosts, h)
		return nil
	}, s.hostResult(q.NQN))
}

func (s *Service) hostModify(q *Host) (any, *Error) {
	return s.then(func(t *configfs.Tree) error {
		h, err := findHost(t, q.NQN)
		if err != nil {
			return err
		}
		setHost(h, q)
		return nil
	}, s.hostResult(q.NQN))
}

func (s *Service) hostDel(q *NQNParams) (any, *Error) {
	return s.then(func(t *configfs.Tree) error {
		h, err := findHost(t, q.NQN)
		if err != nil {
			return err
		}
		var in []string
		for _, ss := range t.Subsystems {
			if slices.Contains(ss.AllowedHosts, q.NQN) {
				in = append(in, ss.NQN)
			}
		}
		if len(in) > 0 && !q.Force {
			return refused("host %q is allowed in %v: disallow it there first, or force to do both", q.NQN, in)
		}
		for _, ss := range t.Subsystems {
			ss.AllowedHosts = slices.DeleteFunc(ss.AllowedHosts, func(h string) bool { return h == q.NQN })
		}
		t.Hosts = slices.DeleteFunc(t.Hosts, func(x *configfs.Host) bool { return x == h })
		return nil
	}, deleted)
}

// allow adds host q.Host to the allowed hosts of subsystem q.NQN (on), or
// removes it.
func (s *Service) allow(q *AllowParams, on bool) (any, *Error) {
	if on {
		if err := required("host", q.Host); err != nil {
			return nil, err
		}
	}
	return s.then(func(t *configfs.Tree) error {
		ss, err := findSubsystem(t, q.NQN)
		if err != nil {
			return err
		}
		listed := slices.Contains(ss.AllowedHosts, q.Host)
		switch {
		case on && listed:
			return exists("subsystem %s allows %s already", q.NQN, q.Host)
		case on && ss.AllowAnyHost:
			return refused("subsystem %s allows any host: set allow_any_host to false first (subsystem.modify)", q.NQN)
		case on:
			ensureHosts(t, []string{q.Host})
			ss.AllowedHosts = append(ss.AllowedHosts, q.Host)
		case !listed:
			return notFound("subsystem %s does not list %s", q.NQN, q.Host)
		default:
			ss.AllowedHosts = slices.DeleteFunc(ss.AllowedHosts, func(h string) bool { return h == q.Host })
		}
		return nil
	}, s.subsystemResult(q.NQN))
}

// --- controllers ---

// CtrlParams name a controller: its ID, and its subsystem when the ID
// alone is ambiguous.
type CtrlParams struct {
	NQN    string `json:"nqn,omitempty"`
	CntlID uint16 `json:"cntlid"`
}

// ctrlListParams are ctrl.list's params.
type ctrlListParams struct {
	NQN       string `json:"nqn,omitempty"`
	Discovery bool   `json:"discovery,omitempty"`
}

func (s *Service) ctrlList(q *ctrlListParams) (any, *Error) {
	out := []Controller{}
	for _, c := range s.srv.Target.Controllers() {
		if (q.NQN != "" && c.Subsystem != q.NQN) || (c.Discovery && !q.Discovery && q.NQN == "") {
			continue
		}
		out = append(out, controllerInfo(c))
	}
	return out, nil
}

func (s *Service) ctrlDisconnect(q *CtrlParams) (any, *Error) {
	var match []controllerSnapshot
	for _, c := range s.srv.Target.Controllers() {
		if c.CntlID == q.CntlID && (q.NQN == "" || c.Subsystem == q.NQN) {
			match = append(match, c)
		}
	}
	switch len(match) {
	case 0:
		if q.NQN != "" {
			return nil, notFound("no controller %d in subsystem %s", q.CntlID, q.NQN)
		}
		return nil, notFound("no controller %d", q.CntlID)
	case 1:
	default:
		return nil, invalidParams("controller ID %d is in several subsystems: give nqn", q.CntlID)
	}
	c := match[0]
	if err := s.srv.Target.Disconnect(c.Subsystem, c.CntlID, "disconnected through the control API"); err != nil {
		if errors.Is(err, target.ErrNotFound) {
			return nil, notFound("controller %d of %s is gone", c.CntlID, c.Subsystem)
		}
		return nil, errorf(CodeInternal, "%v", err)
	}
	return controllerInfo(c), nil
}
