package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
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

// methods by name; docs/control-api.md documents each.
var methods map[string]method

func init() {
	methods = map[string]method{
		"rpc.methods": func(*Service, json.RawMessage) (any, *Error) { return Methods(), nil },

		"config.save": (*Service).configSave,

		"port.list":   (*Service).portList,
		"port.add":    (*Service).portAdd,
		"port.modify": (*Service).portModify,
		"port.del":    (*Service).portDel,
		"port.link":   (*Service).portLink,
		"port.unlink": (*Service).portUnlink,

		"subsystem.list":   (*Service).subsystemList,
		"subsystem.add":    (*Service).subsystemAdd,
		"subsystem.modify": (*Service).subsystemModify,
		"subsystem.del":    (*Service).subsystemDel,

		"ns.list":    (*Service).nsList,
		"ns.add":     (*Service).nsAdd,
		"ns.modify":  (*Service).nsModify,
		"ns.del":     (*Service).nsDel,
		"ns.resize":  (*Service).nsResize,
		"ns.enable":  func(s *Service, p json.RawMessage) (any, *Error) { return s.nsEnable(p, true) },
		"ns.disable": func(s *Service, p json.RawMessage) (any, *Error) { return s.nsEnable(p, false) },

		"host.list":       (*Service).hostList,
		"host.add":        (*Service).hostAdd,
		"host.modify":     (*Service).hostModify,
		"host.del":        (*Service).hostDel,
		"host.allow":      (*Service).hostAllow,
		"host.disallow":   (*Service).hostDisallow,
		"ctrl.list":       (*Service).ctrlList,
		"ctrl.disconnect": (*Service).ctrlDisconnect,
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
	return strings.HasSuffix(name, ".list") || name == "config.save"
}

// changed runs s.change and converts its error.
func (s *Service) changed(edit func(t *configfs.Tree) error) *Error {
	if err := s.change(edit); err != nil {
		return asError(err)
	}
	return nil
}

// --- config ---

// SaveParams are config.save's params.
type SaveParams struct {
	// Format is "hcl" (the default) or "json" (nvmetcli's).
	Format string `json:"format,omitempty"`
	// Path, if set, is where the daemon writes the configuration
	// (replaced atomically, mode 0600).
	Path string `json:"path,omitempty"`
}

// SaveResult is config.save's result.
type SaveResult struct {
	Format string `json:"format"`
	Config string `json:"config"`
	Path   string `json:"path,omitempty"`
	// Warnings name what the format cannot hold (nvmetcli JSON has no
	// log_level and no place for some nvmetd attributes).
	Warnings []string `json:"warnings,omitempty"`
}

// jsonLosses loads the nvmetcli JSON saved of tree back and names what
// differs: what the format does not hold.
func jsonLosses(tree *configfs.Tree, js []byte) []string {
	back, err := configfs.ParseNvmetcliJSON(js, "saved.json")
	if err != nil {
		return []string{"the saved JSON does not load back: " + err.Error()}
	}
	ch := configfs.Diff(tree, back)
	var out []string
	if ch.LogLevel {
		out = append(out, "log_level is not saved (nvmetcli JSON has none)")
	}
	for _, p := range ch.Ports {
		out = append(out, "ports/"+p.ID+": attributes nvmetcli JSON does not hold are not saved (data_pool_size, srq_size)")
	}
	for _, s := range ch.Subsystems {
		out = append(out, "subsystems/"+s.NQN+": attributes nvmetcli JSON does not hold are not saved (max_controllers)")
	}
	for _, l := range [][]string{ch.PortsAdded, ch.PortsRemoved, ch.SubsystemsAdded, ch.SubsystemsRemoved, ch.HostsAdded, ch.HostsRemoved, ch.HostsChanged} {
		for _, n := range l {
			out = append(out, n+": differs once saved as nvmetcli JSON")
		}
	}
	return out
}

func (s *Service) configSave(params json.RawMessage) (any, *Error) {
	var p SaveParams
	if err := decodeParams(params, &p); err != nil {
		return nil, err
	}
	if p.Path != "" {
		// The tree written and the count of unsaved changes agree.
		s.mu.Lock()
		defer s.mu.Unlock()
	}
	tree := s.Tree()
	var out []byte
	var res SaveResult
	switch p.Format {
	case "", "hcl":
		p.Format = "hcl"
		out = tree.HCL()
	case "json":
		b, err := tree.NvmetcliJSON()
		if err != nil {
			return nil, errorf(CodeInternal, "nvmetcli JSON: %v", err)
		}
		out = b
		res.Warnings = jsonLosses(tree, b)
	default:
		return nil, invalidParams("format %q: want hcl or json", p.Format)
	}
	res.Format, res.Config = p.Format, string(out)
	if p.Path != "" {
		if !filepath.IsAbs(p.Path) {
			return nil, invalidParams("path %q: give an absolute path (the daemon's working directory is not the client's)", p.Path)
		}
		if err := writeAtomic(p.Path, out); err != nil {
			return nil, errorf(CodeIO, "writing %s: %v", p.Path, err)
		}
		s.unsaved = 0
		res.Path = p.Path
	}
	return res, nil
}

// writeAtomic writes data to path through a temporary file and a rename.
func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o600)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
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

func (s *Service) portList(params json.RawMessage) (any, *Error) {
	if err := decodeParams(params, &struct{}{}); err != nil {
		return nil, err
	}
	tree := s.Tree()
	ids := tree.PortIDs()
	out := []Port{}
	for _, p := range tree.Ports {
		out = append(out, portInfo(p, ids[p.ID]))
	}
	return out, nil
}

func (s *Service) portResult(id string) (any, *Error) {
	tree := s.Tree()
	if p := tree.Port(id); p != nil {
		return portInfo(p, tree.PortIDs()[id]), nil
	}
	return nil, notFound("port %q is gone", id)
}

func (s *Service) portAdd(params json.RawMessage) (any, *Error) {
	var q Port
	if err := decodeParams(params, &q); err != nil {
		return nil, err
	}
	if q.ID == "" {
		return nil, invalidParams("id is required")
	}
	err := s.changed(func(t *configfs.Tree) error {
		if t.Port(q.ID) != nil {
			return exists("port %q exists", q.ID)
		}
		p := configfs.NewPort(q.ID)
		setPort(p, &q)
		for _, nqn := range q.Subsystems {
			if t.Subsystem(nqn) == nil {
				return notFound("subsystem %q does not exist", nqn)
			}
		}
		p.Subsystems = slices.Clone(q.Subsystems)
		t.Ports = append(t.Ports, p)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.portResult(q.ID)
}

func (s *Service) portModify(params json.RawMessage) (any, *Error) {
	var q Port
	if err := decodeParams(params, &q); err != nil {
		return nil, err
	}
	if q.ID == "" {
		return nil, invalidParams("id is required")
	}
	err := s.changed(func(t *configfs.Tree) error {
		p := t.Port(q.ID)
		if p == nil {
			return notFound("port %q does not exist", q.ID)
		}
		setPort(p, &q)
		if q.Subsystems != nil {
			for _, nqn := range q.Subsystems {
				if t.Subsystem(nqn) == nil {
					return notFound("subsystem %q does not exist", nqn)
				}
			}
			p.Subsystems = slices.Clone(q.Subsystems)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.portResult(q.ID)
}

func (s *Service) portDel(params json.RawMessage) (any, *Error) {
	var q IDParams
	if err := decodeParams(params, &q); err != nil {
		return nil, err
	}
	err := s.changed(func(t *configfs.Tree) error {
		i := slices.IndexFunc(t.Ports, func(p *configfs.Port) bool { return p.ID == q.ID })
		if i < 0 {
			return notFound("port %q does not exist", q.ID)
		}
		if n := s.controllersOn(q.ID, ""); n > 0 && !q.Force {
			return refused("port %q has %d connected controllers: disconnecting them needs force", q.ID, n)
		}
		t.Ports = slices.Delete(t.Ports, i, i+1)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return true, nil
}

func (s *Service) portLink(params json.RawMessage) (any, *Error) { return s.link(params, true) }

func (s *Service) portUnlink(params json.RawMessage) (any, *Error) { return s.link(params, false) }

func (s *Service) link(params json.RawMessage, on bool) (any, *Error) {
	var q LinkParams
	if err := decodeParams(params, &q); err != nil {
		return nil, err
	}
	err := s.changed(func(t *configfs.Tree) error {
		p := t.Port(q.ID)
		switch {
		case p == nil:
			return notFound("port %q does not exist", q.ID)
		case t.Subsystem(q.NQN) == nil:
			return notFound("subsystem %q does not exist", q.NQN)
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
	})
	if err != nil {
		return nil, err
	}
	return s.portResult(q.ID)
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

func (s *Service) subsystemList(params json.RawMessage) (any, *Error) {
	var q struct {
		NQN string `json:"nqn,omitempty"`
	}
	if err := decodeParams(params, &q); err != nil {
		return nil, err
	}
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

func (s *Service) subsystemResult(nqn string) (any, *Error) {
	tree := s.Tree()
	if ss := tree.Subsystem(nqn); ss != nil {
		return subsystemInfo(tree, ss), nil
	}
	return nil, notFound("subsystem %q is gone", nqn)
}

// setPorts makes exactly ports export subsystem nqn.
func setPorts(t *configfs.Tree, nqn string, ports []string) error {
	for _, id := range ports {
		if t.Port(id) == nil {
			return notFound("port %q does not exist", id)
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

func (s *Service) subsystemAdd(params json.RawMessage) (any, *Error) {
	var q Subsystem
	if err := decodeParams(params, &q); err != nil {
		return nil, err
	}
	if q.NQN == "" {
		return nil, invalidParams("nqn is required")
	}
	if q.Namespaces != nil {
		return nil, invalidParams("namespaces: add them with ns.add")
	}
	err := s.changed(func(t *configfs.Tree) error {
		if t.Subsystem(q.NQN) != nil {
			return exists("subsystem %q exists", q.NQN)
		}
		ss := configfs.NewSubsystem(q.NQN)
		setSubsystem(ss, &q)
		ensureHosts(t, ss.AllowedHosts)
		t.Subsystems = append(t.Subsystems, ss)
		return setPorts(t, q.NQN, q.Ports)
	})
	if err != nil {
		return nil, err
	}
	return s.subsystemResult(q.NQN)
}

func (s *Service) subsystemModify(params json.RawMessage) (any, *Error) {
	var q Subsystem
	if err := decodeParams(params, &q); err != nil {
		return nil, err
	}
	if q.Namespaces != nil {
		return nil, invalidParams("namespaces: change them with the ns methods")
	}
	err := s.changed(func(t *configfs.Tree) error {
		ss := t.Subsystem(q.NQN)
		if ss == nil {
			return notFound("subsystem %q does not exist", q.NQN)
		}
		setSubsystem(ss, &q)
		ensureHosts(t, ss.AllowedHosts)
		if q.Ports != nil {
			return setPorts(t, q.NQN, q.Ports)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.subsystemResult(q.NQN)
}

func (s *Service) subsystemDel(params json.RawMessage) (any, *Error) {
	var q NQNParams
	if err := decodeParams(params, &q); err != nil {
		return nil, err
	}
	err := s.changed(func(t *configfs.Tree) error {
		i := slices.IndexFunc(t.Subsystems, func(ss *configfs.Subsystem) bool { return ss.NQN == q.NQN })
		if i < 0 {
			return notFound("subsystem %q does not exist", q.NQN)
		}
		if n := s.controllersOn("", q.NQN); n > 0 && !q.Force {
			return refused("subsystem %q has %d connected controllers: disconnecting them needs force", q.NQN, n)
		}
		t.Subsystems = slices.Delete(t.Subsystems, i, i+1)
		return setPorts(t, q.NQN, nil)
	})
	if err != nil {
		return nil, err
	}
	return true, nil
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

func (s *Service) nsList(params json.RawMessage) (any, *Error) {
	var q struct {
		NQN string `json:"nqn"`
	}
	if err := decodeParams(params, &q); err != nil {
		return nil, err
	}
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

func (s *Service) nsResult(nqn string, nsid uint32) (any, *Error) {
	if ss := s.Tree().Subsystem(nqn); ss != nil {
		if ns := ss.Namespace(nsid); ns != nil {
			return namespaceInfo(nqn, ns), nil
		}
	}
	return nil, notFound("namespace %d of %s is gone", nsid, nqn)
}

// lookupNS returns namespace nsid of subsystem nqn in t.
func lookupNS(t *configfs.Tree, nqn string, nsid uint32) (*configfs.Subsystem, *configfs.Namespace, error) {
	ss := t.Subsystem(nqn)
	if ss == nil {
		return nil, nil, notFound("subsystem %q does not exist", nqn)
	}
	ns := ss.Namespace(nsid)
	if ns == nil {
		return ss, nil, notFound("subsystem %s has no namespace %d", nqn, nsid)
	}
	return ss, ns, nil
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

func (s *Service) nsAdd(params json.RawMessage) (any, *Error) {
	var q Namespace
	if err := decodeParams(params, &q); err != nil {
		return nil, err
	}
	if err := checkPath(&q); err != nil {
		return nil, err
	}
	nsid := q.NSID
	err := s.changed(func(t *configfs.Tree) error {
		ss := t.Subsystem(q.NQN)
		if ss == nil {
			return notFound("subsystem %q does not exist", q.NQN)
		}
		if nsid == 0 { // the lowest free
			for nsid = 1; ss.Namespace(nsid) != nil; nsid++ {
			}
		}
		if ss.Namespace(nsid) != nil {
			return exists("subsystem %s has namespace %d already", q.NQN, nsid)
		}
		ns := configfs.NewNamespace(nsid)
		if err := setNamespace(ns, &q); err != nil {
			return err
		}
		if ns.Backend == "" && ns.DevicePath != "" {
			ns.Backend = configfs.InferBackend(ns.DevicePath)
		}
		ss.Namespaces = append(ss.Namespaces, ns)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.nsResult(q.NQN, nsid)
}

func (s *Service) nsModify(params json.RawMessage) (any, *Error) {
	var q Namespace
	if err := decodeParams(params, &q); err != nil {
		return nil, err
	}
	if err := checkPath(&q); err != nil {
		return nil, err
	}
	err := s.changed(func(t *configfs.Tree) error {
		_, ns, err := lookupNS(t, q.NQN, q.NSID)
		if err != nil {
			return err
		}
		if err := setNamespace(ns, &q); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.nsResult(q.NQN, q.NSID)
}

func (s *Service) nsDel(params json.RawMessage) (any, *Error) {
	var q NSParams
	if err := decodeParams(params, &q); err != nil {
		return nil, err
	}
	err := s.changed(func(t *configfs.Tree) error {
		ss, _, err := lookupNS(t, q.NQN, q.NSID)
		if err != nil {
			return err
		}
		ss.Namespaces = slices.DeleteFunc(ss.Namespaces, func(ns *configfs.Namespace) bool { return ns.NSID == q.NSID })
		return nil
	})
	if err != nil {
		return nil, err
	}
	return true, nil
}

func (s *Service) nsEnable(params json.RawMessage, on bool) (any, *Error) {
	var q NSParams
	if err := decodeParams(params, &q); err != nil {
		return nil, err
	}
	err := s.changed(func(t *configfs.Tree) error {
		_, ns, err := lookupNS(t, q.NQN, q.NSID)
		if err != nil {
			return err
		}
		ns.Enable = on
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.nsResult(q.NQN, q.NSID)
}

func (s *Service) nsResize(params json.RawMessage) (any, *Error) {
	var q ResizeParams
	if err := decodeParams(params, &q); err != nil {
		return nil, err
	}
	rescan := false
	err := s.changed(func(t *configfs.Tree) error {
		_, ns, err := lookupNS(t, q.NQN, q.NSID)
		if err != nil {
			return err
		}
		if q.Size == nil {
			if ns.Backend != configfs.BackendBlock && ns.Backend != configfs.BackendFile || ns.Size != 0 {
				return invalidParams("size is required (only a file or block namespace without a configured size takes its size from the backend again)")
			}
			rescan = true
			return nil
		}
		size := int64(*q.Size)
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
	if err != nil {
		return nil, err
	}
	if rescan {
		// The configuration is unchanged: the backend's size is read
		// again and hosts get a Namespace Attribute Changed event.
		if err := s.srv.Target.RevalidateNamespace(q.NQN, q.NSID); err != nil {
			return nil, errorf(CodeNotApplied, "%v", err)
		}
	}
	return s.nsResult(q.NQN, q.NSID)
}

// --- hosts ---

// AllowParams name a subsystem and a host.
type AllowParams struct {
	NQN  string `json:"nqn"`
	Host string `json:"host"`
}

func (s *Service) hostList(params json.RawMessage) (any, *Error) {
	if err := decodeParams(params, &struct{}{}); err != nil {
		return nil, err
	}
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

func (s *Service) hostResult(nqn string) (any, *Error) {
	tree := s.Tree()
	if h := tree.Host(nqn); h != nil {
		return hostInfo(tree, h), nil
	}
	return nil, notFound("host %q is gone", nqn)
}

func (s *Service) hostAdd(params json.RawMessage) (any, *Error) {
	var q Host
	if err := decodeParams(params, &q); err != nil {
		return nil, err
	}
	if q.NQN == "" {
		return nil, invalidParams("nqn is required")
	}
	err := s.changed(func(t *configfs.Tree) error {
		if t.Host(q.NQN) != nil {
			return exists("host %q exists", q.NQN)
		}
		h := &configfs.Host{NQN: q.NQN}
		setHost(h, &q)
		t.Hosts = append(t.Hosts, h)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.hostResult(q.NQN)
}

func (s *Service) hostModify(params json.RawMessage) (any, *Error) {
	var q Host
	if err := decodeParams(params, &q); err != nil {
		return nil, err
	}
	err := s.changed(func(t *configfs.Tree) error {
		h := t.Host(q.NQN)
		if h == nil {
			return notFound("host %q does not exist", q.NQN)
		}
		setHost(h, &q)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.hostResult(q.NQN)
}

func (s *Service) hostDel(params json.RawMessage) (any, *Error) {
	var q NQNParams
	if err := decodeParams(params, &q); err != nil {
		return nil, err
	}
	err := s.changed(func(t *configfs.Tree) error {
		h := t.Host(q.NQN)
		if h == nil {
			return notFound("host %q does not exist", q.NQN)
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
	})
	if err != nil {
		return nil, err
	}
	return true, nil
}

func (s *Service) hostAllow(params json.RawMessage) (any, *Error) {
	var q AllowParams
	if err := decodeParams(params, &q); err != nil {
		return nil, err
	}
	if q.Host == "" {
		return nil, invalidParams("host is required")
	}
	err := s.changed(func(t *configfs.Tree) error {
		ss := t.Subsystem(q.NQN)
		switch {
		case ss == nil:
			return notFound("subsystem %q does not exist", q.NQN)
		case slices.Contains(ss.AllowedHosts, q.Host):
			return exists("subsystem %s allows %s already", q.NQN, q.Host)
		case ss.AllowAnyHost:
			return refused("subsystem %s allows any host: set allow_any_host to false first (subsystem.modify)", q.NQN)
		}
		ensureHosts(t, []string{q.Host})
		ss.AllowedHosts = append(ss.AllowedHosts, q.Host)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.subsystemResult(q.NQN)
}

func (s *Service) hostDisallow(params json.RawMessage) (any, *Error) {
	var q AllowParams
	if err := decodeParams(params, &q); err != nil {
		return nil, err
	}
	err := s.changed(func(t *configfs.Tree) error {
		ss := t.Subsystem(q.NQN)
		switch {
		case ss == nil:
			return notFound("subsystem %q does not exist", q.NQN)
		case !slices.Contains(ss.AllowedHosts, q.Host):
			return notFound("subsystem %s does not list %s", q.NQN, q.Host)
		}
		ss.AllowedHosts = slices.DeleteFunc(ss.AllowedHosts, func(h string) bool { return h == q.Host })
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.subsystemResult(q.NQN)
}

// --- controllers ---

// CtrlParams name a controller: its ID, and its subsystem when the ID
// alone is ambiguous.
type CtrlParams struct {
	NQN    string `json:"nqn,omitempty"`
	CntlID uint16 `json:"cntlid"`
}

func (s *Service) ctrlList(params json.RawMessage) (any, *Error) {
	var q struct {
		NQN       string `json:"nqn,omitempty"`
		Discovery bool   `json:"discovery,omitempty"`
	}
	if err := decodeParams(params, &q); err != nil {
		return nil, err
	}
	out := []Controller{}
	for _, c := range s.srv.Target.Controllers() {
		if (q.NQN != "" && c.Subsystem != q.NQN) || (c.Discovery && !q.Discovery && q.NQN == "") {
			continue
		}
		out = append(out, controllerInfo(c))
	}
	return out, nil
}

func (s *Service) ctrlDisconnect(params json.RawMessage) (any, *Error) {
	var q CtrlParams
	if err := decodeParams(params, &q); err != nil {
		return nil, err
	}
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
