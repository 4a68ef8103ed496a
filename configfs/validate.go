package configfs

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/nvmeof/nvmeof/internal/suggest"
)

// Error is one configuration error.
type Error struct {
	// Range is where the error is in the source file; nil when the tree
	// did not come from a file with positions (nvmetcli JSON, code).
	Range *hcl.Range
	// Path names the object as a configfs path below nvmet/, like
	// "subsystems/nqn.2026-11.io.nvmeof:disk0/namespaces/1"; empty for
	// the top level.
	Path string
	// Attr is the attribute, as the source spells it (the HCL name when
	// the tree came from HCL, else the configfs name); empty when the
	// error is about the object itself.
	Attr string
	Msg  string
	// Err is the error Msg comes from, when a program's check made it
	// (Tree.NamespaceError, Tree.PortError); Unwrap returns it.
	Err error
}

// Unwrap returns Err, for errors.Is and errors.As.
func (e *Error) Unwrap() error { return e.Err }

// NamespaceError places err, found by a program about namespace ns of
// subsystem nqn (a backend that does not open, say), like a validation
// error: at attribute attr (a configfs name such as "device_path" or
// "size"; the namespace block when "" or not written) with the file
// position, or the file name for nvmetcli JSON.
func (t *Tree) NamespaceError(nqn string, ns *Namespace, attr string, err error) *Error {
	nsid := strconv.FormatUint(uint64(ns.NSID), 10)
	return t.placed(ns.src, nsHCLNames, "subsystems/"+nqn+"/namespaces/"+nsid, attr, err, "ns", nqn+"/"+nsid)
}

// PortError places err about port p as NamespaceError does (attr: a
// configfs name such as "addr_traddr").
func (t *Tree) PortError(p *Port, attr string, err error) *Error {
	return t.placed(p.src, portHCLNames, "ports/"+p.ID, attr, err, "port", p.ID)
}

// placed places err like a validation error, or for trees from nvmetcli
// JSON at the line of the object's (kind, id) value for attr, else of the
// object (see jsonPlaces).
func (t *Tree) placed(src *source, names map[string]string, path, attr string, err error, kind, id string) *Error {
	if places := t.jsonPlaces(src); places != nil {
		e := &Error{Path: path, Attr: attr, Msg: err.Error(), Err: err}
		if a, ok := places.attrs[jsonKey(kind, id, attr)]; ok {
			e.Range = &a.rng
			return e
		}
		if a, ok := places.attrs[jsonKey(kind, id, "")]; ok {
			e.Range = &a.rng
			return e
		}
	}
	if src != nil {
		// About a value that decoded: never dropped as already reported.
		s := *src
		s.bad = nil
		src = &s
	}
	e := newError(src, names, path, attr, "%v", err)
	e.Err = err
	if t.file != "" {
		Errors{e}.inFile(t.file)
	}
	return e
}

// Error formats the error as "file:line:col: path: attr: message".
func (e *Error) Error() string {
	var b strings.Builder
	if e.Range != nil {
		fmt.Fprintf(&b, "%s:%d:%d: ", e.Range.Filename, e.Range.Start.Line, e.Range.Start.Column)
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	if e.Attr != "" {
		b.WriteString(e.Attr)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is a list of configuration errors; it is the error type of
// Validate and the loaders.
type Errors []*Error

// Error joins the errors, one per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the errors, for errors.Is and errors.As.
func (es Errors) Unwrap() []error {
	errs := make([]error, len(es))
	for i, e := range es {
		errs[i] = e
	}
	return errs
}

// errorOrNil returns es as an error, or nil when it is empty.
func (es Errors) errorOrNil() error {
	if len(es) == 0 {
		return nil
	}
	return es
}

// inFile names the file in errors that have no position (trees from
// nvmetcli JSON): "file: path: …".
func (es Errors) inFile(filename string) {
	for _, e := range es {
		if e.Range != nil {
			continue
		}
		if e.Path != "" {
			e.Path = filename + ": " + e.Path
		} else {
			e.Path = filename
		}
	}
}

// sortByPosition orders errors by file position; errors without one keep
// their order after the others.
func (es Errors) sortByPosition() {
	slices.SortStableFunc(es, func(a, b *Error) int {
		switch {
		case a.Range == nil && b.Range == nil:
			return 0
		case a.Range == nil:
			return 1
		case b.Range == nil:
			return -1
		}
		return cmp.Or(cmp.Compare(a.Range.Filename, b.Range.Filename), cmp.Compare(a.Range.Start.Byte, b.Range.Start.Byte))
	})
}

// Source names of attributes: configfs name -> HCL name, per object kind.
var (
	treeHCLNames = map[string]string{"log_level": "log_level"}
	portHCLNames = map[string]string{
		"addr_trtype": "transport", "provider": "provider", "device": "device", "tos": "tos", "connect_timeout": "connect_timeout",
		"max_pending": "max_pending", "max_pending_per_host": "max_pending_per_host", "addr_traddr": "address",
		"data_pool_size": "data_pool_size", "srq_size": "srq_size",
		"addr_adrfam": "address_family", "addr_trsvcid": "service", "addr_treq": "treq",
		"param_inline_data_size": "inline_data_size", "addr_portid": "portid", "subsystems": "subsystems",
	}
	subsysHCLNames = map[string]string{
		"ports": "ports", "attr_allow_any_host": "allow_any_host", "allowed_hosts": "allowed_hosts",
		"attr_serial": "serial", "attr_model": "model", "attr_firmware": "firmware", "attr_version": "version",
		"attr_cntlid_min": "cntlid_min", "attr_cntlid_max": "cntlid_max",
		"attr_qid_max": "qid_max", "max_controllers": "max_controllers", "max_controllers_per_host": "max_controllers_per_host",
	}
	nsHCLNames = map[string]string{
		"backend": "backend", "device_path": "path", "size": "size", "block_size": "block_size", "grow": "grow",
		"device_uuid": "uuid", "device_nguid": "nguid", "device_eui64": "eui64", "enable": "enabled",
		"buffered_io": "buffered_io", "queue_depth": "queue_depth", "resv_enable": "resv_enable", "resv_ptpl_file": "resv_ptpl_file", "ana_grpid": "ana_grpid", "pool": "pool", "image": "image", "ceph_conf": "ceph_conf", "client_id": "client_id", "keyring": "keyring",
	}
	// anaGroupHCLNames are the attributes of a port's ana_group block
	// (ports/<id>/ana_groups/<grpid>/).
	anaGroupHCLNames = map[string]string{"ana_state": "state"}
)

// collector accumulates errors and warnings.
type collector struct {
	errs, warns Errors
	// checkProvider is Loader.CheckProvider.
	checkProvider func(provider, device string) error
}

// add records an error about attribute attr (a configfs name, or "" for
// the object) of the object at path, placing it with the object's source.
func (c *collector) add(src *source, names map[string]string, path, attr, format string, args ...any) {
	if e := newError(src, names, path, attr, format, args...); e != nil {
		c.errs = append(c.errs, e)
	}
}

// warn records a warning as add records an error.
func (c *collector) warn(src *source, names map[string]string, path, attr, format string, args ...any) {
	if e := newError(src, names, path, attr, format, args...); e != nil {
		c.warns = append(c.warns, e)
	}
}

// newError returns an Error placed with the object's source, or nil when
// the attribute's value already failed to decode.
func newError(src *source, names map[string]string, path, attr, format string, args ...any) *Error {
	if src != nil && src.bad[attr] {
		return nil
	}
	e := &Error{Path: path, Attr: attr, Msg: fmt.Sprintf(format, args...)}
	if src != nil {
		if a, ok := src.attrs[attr]; ok {
			e.Attr = a.name
			e.Range = &a.rng
		} else {
			if n, ok := names[attr]; ok {
				e.Attr = n
			}
			switch {
			case src.label != (hcl.Range{}):
				e.Range = &src.label
			case src.block != (hcl.Range{}):
				e.Range = &src.block
			}
		}
	}
	return e
}

// LogLevels lists the accepted log_level values.
var LogLevels = []string{"trace", "debug", "info", "warn", "error", "off"}

// Validate checks the whole tree and returns every error found as Errors,
// or nil. What it accepts with a warning, Warnings returns.
func (t *Tree) Validate() error { return Loader{}.Validate(t) }

// Loader loads and validates configurations for a program, with checks
// beyond the format's that only the program can make. The zero Loader is
// what the package-level LoadFile, ParseHCL, ParseNvmetcliJSON and
// Tree.Validate use.
type Loader struct {
	// CheckProvider, if set, is asked about the provider (ProviderAuto
	// for an empty one) and device of every rdma port whose provider and
	// device are valid names: an error makes the port invalid, reported
	// at its provider attribute (at device when auto is asked for a
	// device), with the file position like any other. cmd/nvmetd passes
	// rdma/provider.Check, which refuses a provider not built into the
	// binary; configfs itself stays free of the RDMA providers.
	CheckProvider func(provider, device string) error
}

func (l Loader) collector() *collector { return &collector{checkProvider: l.CheckProvider} }

// Validate checks t as Tree.Validate does, with l's checks.
func (l Loader) Validate(t *Tree) error {
	c := l.collector()
	t.validate(c)
	return c.errs.errorOrNil()
}

// Warnings returns what validation accepts but reports, like errors with
// their positions: subsystem and host names that are safe but not
// conforming NQNs (see CheckNQN), which the Linux target accepts, and
// keys of nvmetcli JSON ignored (see ParseNvmetcliJSON). The
// loaders return trees with warnings without error; callers should show
// the warnings (reconcile.Reconciler.Apply logs them). Nil when there are
// none.
func (t *Tree) Warnings() Errors {
	c := &collector{}
	t.validate(c)
	c.warns = append(c.warns, t.loadWarns...)
	c.warns.sortByPosition()
	if t.file != "" {
		c.warns.inFile(t.file)
	}
	return c.warns
}

func (t *Tree) validate(c *collector) {
	if t.LogLevel != "" && !slices.Contains(LogLevels, t.LogLevel) {
		c.add(t.src, treeHCLNames, "", "log_level", "unknown level %q (want %s)", t.LogLevel, strings.Join(LogLevels, ", "))
	}

	hosts := make(map[string]bool)
	for _, h := range t.Hosts {
		path := "hosts/" + h.NQN
		// The NQN errors of a host created for allowed_hosts are reported
		// there.
		switch warn, err := CheckNQN(h.NQN); {
		case err != nil && !h.implicit:
			c.add(h.src, nil, path, "", "%v", err)
		case warn != nil:
			c.warn(h.src, nil, path, "", "%v", warn)
		}
		if hosts[h.NQN] {
			c.add(h.src, nil, path, "", "host declared twice")
		}
		h.validateAuth(c, path)
		hosts[h.NQN] = true
	}

	subsystems := make(map[string]bool)
	uuids := make(map[UUID]string)
	nguids := make(map[NGUID]string)
	euis := make(map[EUI64]string)
	for _, s := range t.Subsystems {
		path := "subsystems/" + s.NQN
		if subsystems[s.NQN] {
			c.add(s.src, nil, path, "", "subsystem declared twice")
		}
		subsystems[s.NQN] = true
		s.validate(c, path, hosts)
		for _, ns := range s.Namespaces {
			nspath := path + "/namespaces/" + strconv.FormatUint(uint64(ns.NSID), 10)
			if !ns.DeviceUUID.IsZero() {
				if other, dup := uuids[ns.DeviceUUID]; dup {
					c.add(ns.src, nsHCLNames, nspath, "device_uuid", "UUID %s is also used by %s", ns.DeviceUUID, other)
				} else {
					uuids[ns.DeviceUUID] = nspath
				}
			}
			if !ns.DeviceNGUID.IsZero() {
				if other, dup := nguids[ns.DeviceNGUID]; dup {
					c.add(ns.src, nsHCLNames, nspath, "device_nguid", "NGUID %s is also used by %s", ns.DeviceNGUID, other)
				} else {
					nguids[ns.DeviceNGUID] = nspath
				}
			}
			if !ns.DeviceEUI64.IsZero() {
				if other, dup := euis[ns.DeviceEUI64]; dup {
					c.add(ns.src, nsHCLNames, nspath, "device_eui64", "EUI-64 %s is also used by %s", ns.DeviceEUI64, other)
				} else {
					euis[ns.DeviceEUI64] = nspath
				}
			}
		}
	}

	ids := make(map[string]bool)
	portids := make(map[uint16]string)
	listen := make(map[string]string)
	softDevs := make(map[string]*Port)
	for _, p := range t.Ports {
		path := "ports/" + p.ID
		checkSharedCongestion(c, softDevs, p, path)
		if ids[p.ID] {
			c.add(p.src, nil, path, "", "port declared twice")
		}
		ids[p.ID] = true
		if id, ok := explicitPortID(p); ok {
			if other, dup := portids[id]; dup {
				attr := "addr_portid"
				if p.PortID == 0 {
					attr = ""
				}
				c.add(p.src, portHCLNames, path, attr, "port ID %d is also used by %s", id, other)
			} else {
				portids[id] = path
			}
		}
		p.validate(c, path, subsystems)
		// Two ports on one address and service of a transport: the
		// second would fail at listen time, after the first started.
		svc := p.Trsvcid
		if svc == "" {
			svc = DefaultTrsvcid
		}
		key := p.Trtype + " " + p.Traddr + " " + svc
		if a, err := netip.ParseAddr(p.Traddr); err == nil {
			key = p.Trtype + " " + a.Unmap().String() + " " + svc
		}
		if other, dup := listen[key]; dup {
			c.add(p.src, portHCLNames, path, "addr_trsvcid", "%s %s service %s is also used by %s", p.Trtype, p.Traddr, svc, other)
		} else {
			listen[key] = path
		}
	}

	t.validateANAGroups(c)
}

// validateANAGroups warns about namespaces in an ANA group that a port
// exporting their subsystem does not list: the port reports the group
// inaccessible, so hosts do no I/O to them through it. Group 1 every port
// has.
func (t *Tree) validateANAGroups(c *collector) {
	for _, s := range t.Subsystems {
		ports := t.PortsOf(s.NQN)
		for _, ns := range s.Namespaces {
			grp := ns.EffectiveANAGrpID()
			if grp == DefaultANAGroup || grp > MaxANAGroups {
				continue
			}
			var missing []string
			for _, p := range ports {
				if p.ANAState(grp) == "" {
					missing = append(missing, p.ID)
				}
			}
			if len(missing) == 0 {
				continue
			}
			nspath := "subsystems/" + s.NQN + "/namespaces/" + strconv.FormatUint(uint64(ns.NSID), 10)
			which := "port " + missing[0] + ", which exports"
			if len(missing) > 1 {
				which = "ports " + strings.Join(missing, ", ") + ", which export"
			}
			c.warn(ns.src, nsHCLNames, nspath, "ana_grpid", "ANA group %d is not on %s the subsystem: the group is inaccessible there, so hosts cannot use the namespace through it",
				grp, which)
		}
	}
}

func (p *Port) validate(c *collector, path string, subsystems map[string]bool) {
	add := func(attr, format string, args ...any) { c.add(p.src, portHCLNames, path, attr, format, args...) }
	if !validPortName(p.ID) {
		add("", "port name %q: use 1-64 letters, digits, '_', '.' or '-'", p.ID)
	}
	switch p.Trtype {
	case TransportRDMA:
		p.validateProvider(c, add)
		p.validateIPAddress(add)
	case TransportTCP:
		p.validateIPAddress(add)
		if p.Provider != "" && p.Provider != ProviderAuto {
			add("provider", "provider %q needs transport rdma", p.Provider)
		}
		if p.Device != "" {
			add("device", "an RDMA device needs transport rdma")
		}
		if p.MaxPendingPerHost > 0 {
			add("max_pending_per_host", "max_pending_per_host needs transport rdma (tcp bounds the connections in their handshake with max_pending)")
		}
		if p.DataPoolSize > 0 {
			add("data_pool_size", "data_pool_size needs transport rdma (tcp queues keep a buffer per command slot)")
		}
		if p.SRQSize >= 0 {
			add("srq_size", "srq_size needs transport rdma")
		}
	case TransportLoop:
		if p.Device != "" {
			add("device", "an RDMA device needs transport rdma")
		}
		if p.TOS >= 0 {
			add("tos", "tos needs transport rdma or tcp")
		}
	case "":
		add("addr_trtype", "transport is required (rdma, tcp or loop)")
	default:
		add("addr_trtype", "unknown transport %q (want rdma, tcp or loop)", p.Trtype)
	}
	switch p.Treq {
	case "", TreqNotSpecified, TreqRequired, TreqNotRequired:
	default:
		add("addr_treq", "unknown value %q (want \"not specified\", \"required\" or \"not required\")", p.Treq)
	}
	if p.InlineDataSize > MaxInlineDataSize {
		add("param_inline_data_size", "%d is more than %d bytes", p.InlineDataSize, MaxInlineDataSize)
	}
	p.validateANAGroups(c, path)
	if p.Congestion != nil {
		p.Congestion.validate(c, p, path)
	}
	seen := make(map[string]bool)
	for _, nqn := range p.Subsystems {
		if seen[nqn] {
			add("subsystems", "subsystem %q listed twice", nqn)
		}
		seen[nqn] = true
		if !subsystems[nqn] {
			add("subsystems", "unknown subsystem %q (no subsystem block declares it)", nqn)
		}
	}
}

// validateIPAddress checks the address, family and service of an rdma or
// tcp port.
func (p *Port) validateIPAddress(add func(attr, format string, args ...any)) {
	addr, err := netip.ParseAddr(p.Traddr)
	switch {
	case p.Traddr == "":
		add("addr_traddr", "an IP address is required for transport %s", p.Trtype)
	case err != nil:
		add("addr_traddr", "%q is not an IPv4 or IPv6 address", p.Traddr)
	case addr.Zone() != "":
		add("addr_traddr", "%q: zones are not allowed (discovery log entries carry no zone)", p.Traddr)
	case p.Adrfam != "" && p.Adrfam != p.DerivedAdrfam():
		add("addr_adrfam", "%q does not match address %s (an %s address)", p.Adrfam, p.Traddr, p.DerivedAdrfam())
	}
	if p.Adrfam != "" && p.Adrfam != AdrfamIPv4 && p.Adrfam != AdrfamIPv6 {
		add("addr_adrfam", "unknown address family %q (want ipv4 or ipv6)", p.Adrfam)
	}
	if n, err := strconv.ParseUint(p.Trsvcid, 10, 16); err != nil || n == 0 || p.Trsvcid[0] == '0' {
		add("addr_trsvcid", "service %q is not a port number from 1 to 65535", p.Trsvcid)
	}
}

// validateANAGroups checks the port's ANA groups: IDs from 1 to
// MaxANAGroups, each once, with a known state.
func (p *Port) validateANAGroups(c *collector, path string) {
	seen := make(map[uint32]bool)
	for _, g := range p.ANAGroups {
		gpath := path + "/ana_groups/" + strconv.FormatUint(uint64(g.GrpID), 10)
		src := p.src.subSource(anaGroupKey(g.GrpID))
		if src == nil {
			src = p.src // trees from JSON or code: the port's place
		}
		add := func(attr, format string, args ...any) { c.add(src, anaGroupHCLNames, gpath, attr, format, args...) }
		if g.GrpID < 1 || g.GrpID > MaxANAGroups {
			add("", "ANA group ID %d is not from 1 to %d", g.GrpID, MaxANAGroups)
		}
		if seen[g.GrpID] {
			add("", "ANA group %d listed twice", g.GrpID)
		}
		seen[g.GrpID] = true
		if !slices.Contains(ANAStates, g.State) {
			msg := fmt.Sprintf("unknown ANA state %q", g.State)
			if g.State == "" {
				msg = "an ANA state is required"
			} else if m := suggest.Closest(strings.ToLower(g.State), ANAStates); m != "" {
				msg += fmt.Sprintf("; did you mean %q?", m)
			}
			add("ana_state", "%s (want %s)", msg, strings.Join(ANAStates, ", "))
		}
	}
}

// validateProvider checks provider, device and tos of an rdma port, and
// asks c.checkProvider whether this program has the provider.
func (p *Port) validateProvider(c *collector, add func(attr, format string, args ...any)) {
	ok := true
	switch p.Provider {
	case "", ProviderAuto, ProviderIBVerbs:
	case ProviderSoft:
		if p.Device != "" {
			add("device", "device %q needs the ibverbs provider (or auto), not soft: the soft provider has no devices to choose from", p.Device)
			ok = false
		}
	default:
		add("provider", "unknown provider %q (want auto, soft or ibverbs)", p.Provider)
		ok = false
	}
	if p.Device != "" && !validDeviceName(p.Device) {
		add("device", "%q is not an RDMA device name (like mlx5_0 or rxe0: 1-63 letters, digits, '_', '.' or '-')", p.Device)
		ok = false
	}
	if p.TOS > MaxTOS {
		add("tos", "%d is not from 0 to %d", p.TOS, MaxTOS)
	}
	if !ok || c.checkProvider == nil {
		return
	}
	if err := c.checkProvider(p.EffectiveProvider(), p.Device); err != nil {
		// Point at what asks for the missing provider: provider when
		// written, else device (auto with a device needs ibverbs).
		attr := "provider"
		if _, written := p.src.attrOK("provider"); !written && p.Device != "" {
			attr = "device"
		}
		add(attr, "%v", err)
	}
}

// attrOK returns the attribute as written in the source, if it was.
func (s *source) attrOK(attr string) (srcAttr, bool) {
	if s == nil {
		return srcAttr{}, false
	}
	a, ok := s.attrs[attr]
	return a, ok
}

// validDeviceName reports whether s can name an rdma-core device (the
// kernel's IB_DEVICE_NAME_MAX is 64 with the NUL).
func validDeviceName(s string) bool {
	return s != "" && len(s) < 64 && validPortName(s)
}

func validPortName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// validASCII checks a subsystem string attribute like the kernel: at most
// max bytes of printable ASCII (0x20..0x7e).
func validASCII(s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("%q is %d bytes long, more than %d", s, len(s), max)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return fmt.Errorf("%q: only printable ASCII characters are allowed", s)
		}
	}
	return nil
}

// ParseVersion parses attr_version ("major.minor" or
// "major.minor.tertiary") into the NVMe VS register layout.
func ParseVersion(s string) (uint32, error) {
	parts := strings.Split(s, ".")
	if len(parts) != 2 && len(parts) != 3 {
		return 0, fmt.Errorf("version %q: want major.minor or major.minor.tertiary", s)
	}
	var v [3]uint64
	limits := [3]uint64{0xffff, 0xff, 0xff}
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil || n > limits[i] || !allDigits(p) {
			return 0, fmt.Errorf("version %q: want major (0-65535).minor (0-255)[.tertiary (0-255)]", s)
		}
		v[i] = n
	}
	return uint32(v[0]<<16 | v[1]<<8 | v[2]), nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func (s *Subsystem) validate(c *collector, path string, hosts map[string]bool) {
	add := func(attr, format string, args ...any) { c.add(s.src, subsysHCLNames, path, attr, format, args...) }
	switch warn, err := CheckNQN(s.NQN); {
	case err != nil:
		add("", "%v", err)
	case warn != nil:
		c.warn(s.src, subsysHCLNames, path, "", "%v", warn)
	case s.NQN == DiscoveryNQN:
		add("", "the discovery NQN cannot name a subsystem")
	}
	if err := validASCII(s.Serial, MaxSerialLen); err != nil {
		add("attr_serial", "%v", err)
	}
	if err := validASCII(s.Model, MaxModelLen); err != nil {
		add("attr_model", "%v", err)
	}
	if err := validASCII(s.Firmware, MaxFirmwareLen); err != nil {
		add("attr_firmware", "%v", err)
	}
	if s.Version != "" {
		if _, err := ParseVersion(s.Version); err != nil {
			add("attr_version", "%v", err)
		}
	}
	lo, hi := s.EffectiveCntlidRange()
	if hi > DefaultCntlidMax {
		add("attr_cntlid_max", "%d is more than %d (NVME_CNTLID_MAX)", hi, DefaultCntlidMax)
	}
	if lo > hi {
		add("attr_cntlid_min", "%d is more than cntlid_max %d", lo, hi)
	}
	if s.AllowAnyHost && len(s.AllowedHosts) > 0 {
		add("allowed_hosts", "cannot list allowed hosts when allow_any_host is set")
	}
	seen := make(map[string]bool)
	for _, h := range s.AllowedHosts {
		// Warnings about the name are the host's (hosts/).
		_, err := CheckNQN(h)
		switch {
		case seen[h]:
			add("allowed_hosts", "host %q listed twice", h)
		case err != nil:
			add("allowed_hosts", "%v", err)
		case !hosts[h]:
			add("allowed_hosts", "unknown host %q (hosts/ has no such host)", h)
		}
		seen[h] = true
	}
	nsids := make(map[uint32]bool)
	for _, ns := range s.Namespaces {
		nspath := path + "/namespaces/" + strconv.FormatUint(uint64(ns.NSID), 10)
		if nsids[ns.NSID] {
			c.add(ns.src, nsHCLNames, nspath, "", "namespace %d declared twice", ns.NSID)
		}
		nsids[ns.NSID] = true
		ns.validate(c, nspath)
	}
}

func (ns *Namespace) validate(c *collector, path string) {
	add := func(attr, format string, args ...any) { c.add(ns.src, nsHCLNames, path, attr, format, args...) }
	if ns.NSID == 0 || ns.NSID > MaxNSID {
		add("", "NSID %d is not from 1 to %d", ns.NSID, uint32(MaxNSID))
	}
	if ns.QueueDepth < 0 || ns.QueueDepth > MaxQueueDepth {
		add("queue_depth", "queue depth %d is not from 1 to %d", ns.QueueDepth, MaxQueueDepth)
	}
	if ns.ANAGrpID > MaxANAGroups {
		add("ana_grpid", "ANA group %d is not from 1 to %d", ns.ANAGrpID, MaxANAGroups)
	}
	if ns.ResvPTPLFile != "" && !ns.ResvEnable {
		add("resv_ptpl_file", "a reservation file needs resv_enable = true")
	}
	switch ns.Backend {
	case BackendFile, BackendBlock:
		if ns.DevicePath == "" {
			add("device_path", "a path is required for backend %s", ns.Backend)
		}
	case BackendMemory, BackendNull:
		if ns.DevicePath != "" {
			add("device_path", "backend %s takes no path", ns.Backend)
		}
		if ns.Size == 0 {
			add("size", "a size is required for backend %s", ns.Backend)
		}
	case BackendRBD:
		if ns.DevicePath != "" {
			add("device_path", "backend rbd takes no path (pool and image name the image)")
		}
		if ns.Pool == "" {
			add("pool", "a pool is required for backend rbd")
		}
		if ns.Image == "" {
			add("image", "an image is required for backend rbd")
		}
	case "":
		add("backend", "a backend is required (file, block, memory, null or rbd)")
	default:
		add("backend", "unknown backend %q (want file, block, memory, null or rbd)", ns.Backend)
	}
	if ns.Backend != BackendRBD {
		for _, kv := range []struct{ attr, v string }{{"pool", ns.Pool}, {"image", ns.Image},
			{"ceph_conf", ns.CephConf}, {"client_id", ns.ClientID}, {"keyring", ns.Keyring}} {
			if kv.v != "" {
				add(kv.attr, "only backend rbd takes %s", kv.attr)
			}
		}
	}
	bs := ns.BlockSize
	if bs != 0 && (bs < 512 || bs > 65536 || bs&(bs-1) != 0) {
		add("block_size", "%d is not a power of two from 512 to 65536", bs)
		bs = 0
	}
	if bs == 0 {
		bs = 512
	}
	switch {
	case ns.Size < 0:
		add("size", "negative size %d", ns.Size)
	case ns.Size%int64(bs) != 0:
		add("size", "%d bytes is not a multiple of the block size %d", ns.Size, bs)
	}
}
