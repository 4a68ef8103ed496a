// Package reconcile makes a target.Target match a configuration tree
// (configfs): the first tree builds everything, a later one (a reload)
// changes only what differs from the tree applied before (configfs.Diff),
// all or nothing. The target itself knows NVMe (subsystems, namespaces,
// ports, hosts) through its imperative API; this package is the only
// place that maps our configuration format onto it. target/server and
// the control API use it.
package reconcile

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/target"
	"github.com/nvmeof/nvmeof/target/bdev"
)

// Reconciler applies configuration trees to one target. Its methods are
// safe for concurrent use; one apply runs at a time.
type Reconciler struct {
	t   *target.Target
	log hclog.Logger

	// The tree as applied (what failed left out) and the port numbers
	// of its port names.
	mu      sync.Mutex
	applied *configfs.Tree
	portIDs map[string]uint16
}

// New returns a reconciler of t that has applied nothing yet; log (nil:
// none) gets what an apply refuses, warns about and fails.
func New(t *target.Target, log hclog.Logger) *Reconciler {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Reconciler{t: t, log: log}
}

// Target returns the target the reconciler applies to.
func (rc *Reconciler) Target() *target.Target { return rc.t }

// PortListener is a port whose transport listener the caller runs: listen
// at Address (with the RDMA provider, device and TOS, and InlineDataSize
// for the transport) and pass the listener to Target.Serve with ID.
type PortListener struct {
	Name    string
	ID      uint16
	Address fabrics.Address
	// Provider names the RDMA provider ("soft", "ibverbs", "auto"; ""
	// means auto), Device the rdma-core device ("" for the one holding
	// the address); TOS is the IP type of service, negative for the
	// provider's default. The target does not interpret them.
	Provider       string
	Device         string
	TOS            int
	InlineDataSize int
	// ConnectTimeout bounds a queue's time from CM REQ to Fabrics
	// Connect (0: the transport's default).
	ConnectTimeout time.Duration
	// MaxPending and MaxPendingPerHost bound the queues between CM REQ
	// and Fabrics Connect (0: the transport's defaults).
	MaxPending, MaxPendingPerHost int
	// DataPoolBytes caps the port's shared data staging buffers, SRQSize
	// sizes its shared receive queue (0: the transport's defaults;
	// SRQSize negative: none).
	DataPoolBytes int64
	SRQSize       int
	// Congestion is the port's congestion block (soft provider; nil:
	// none), for the code that opens the port's device.
	Congestion *configfs.Congestion
}

// Changes says what Apply did to ports.
type Changes struct {
	// Start lists the ports to serve: new ones, and ports whose address
	// or transport parameters changed (their old Serve has returned).
	Start []PortListener
	// Stopped lists the names of ports removed or restarted: their Serve
	// has returned.
	Stopped []string
}

// Apply makes the target match a validated configfs tree: the first
// call builds everything, later calls (a reload) apply the difference from
// the tree applied before (configfs.Diff) without disturbing what did not
// change. Validation warnings (configfs.Tree.Warnings) are logged. It is
// ApplyWith without a prepare step: all or nothing as that describes.
func (rc *Reconciler) Apply(tree *configfs.Tree) (Changes, error) {
	return rc.ApplyWith(tree, nil)
}

// applyANAGroup moves a namespace that stays to its new ANA group.
func (rc *Reconciler) applyANAGroup(nqn string, was, now *configfs.Namespace, fail func(error)) {
	if was.EffectiveANAGrpID() == now.EffectiveANAGrpID() {
		return
	}
	if err := rc.t.SetNamespaceANAGroup(nqn, now.NSID, now.EffectiveANAGrpID()); err != nil {
		fail(err)
	}
}

// NotAppliedError is ApplyWith's error when it changed nothing:
// the configuration applied before is in effect as it was.
type NotAppliedError struct{ Err error }

// Error implements error.
func (e *NotAppliedError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *NotAppliedError) Unwrap() error { return e.Err }

// nsKey names a namespace of a subsystem.
type nsKey struct {
	nqn  string
	nsid uint32
}

func portListener(p *configfs.Port, cfg target.PortConfig) PortListener {
	return PortListener{Name: p.ID, ID: cfg.ID, Address: cfg.Address,
		Provider: p.Provider, Device: p.Device, TOS: p.TOS, InlineDataSize: cfg.InlineDataSize,
		ConnectTimeout: time.Duration(p.ConnectTimeout) * time.Second, MaxPending: p.MaxPending, MaxPendingPerHost: p.MaxPendingPerHost,
		DataPoolBytes: p.DataPoolSize, SRQSize: srqSize(p.SRQSize), Congestion: p.Congestion}
}

// srqSize maps a port's srq_size (0 none, negative unset) to the
// transport's (0 its default, negative none).
func srqSize(n int) int {
	switch {
	case n < 0:
		return 0
	case n == 0:
		return -1
	}
	return n
}

// sameBlockDevice reports whether two versions of a namespace use the
// same block device node.
func sameBlockDevice(a, b *configfs.Namespace) bool {
	return a != nil && b != nil && a.Backend == configfs.BackendBlock && b.Backend == configfs.BackendBlock &&
		filepath.Clean(a.DevicePath) == filepath.Clean(b.DevicePath)
}

// nsSpec is the backend of a configfs namespace.
func nsSpec(ns *configfs.Namespace) bdev.Spec {
	return bdev.Spec{Kind: ns.Backend, Path: ns.DevicePath, Size: ns.Size, BlockSize: ns.BlockSize,
		Grow: ns.Grow, BufferedIO: ns.BufferedIO, QueueDepth: ns.QueueDepth,
		Pool: ns.Pool, Image: ns.Image, CephConf: ns.CephConf, ClientID: ns.ClientID, Keyring: ns.Keyring}
}

// backendAttr is the attribute a backend error is placed at: the path of
// the backends that have one, the backend of rbd, else the size.
func backendAttr(ns *configfs.Namespace) string {
	switch ns.Backend {
	case configfs.BackendFile, configfs.BackendBlock:
		return "device_path"
	case configfs.BackendRBD:
		return "backend"
	}
	return "size"
}

// CheckMemory checks that the memory backends of tree together are no
// larger than the machine's memory (bdev.PhysicalMemory): they are sparse,
// but once hosts fill them the process would die. The error is placed at
// the size of the namespace that goes over.
func CheckMemory(tree *configfs.Tree) error {
	ram := bdev.PhysicalMemory()
	if ram <= 0 {
		return nil
	}
	var total int64
	for _, s := range tree.Subsystems {
		for _, ns := range s.Namespaces {
			if ns.Backend != configfs.BackendMemory || ns.Size <= 0 {
				continue
			}
			switch {
			case ns.Size > ram:
				return tree.NamespaceError(s.NQN, ns, "size", &bdev.MemoryError{Size: ns.Size, Memory: ram})
			case ns.Size > ram-total:
				return tree.NamespaceError(s.NQN, ns, "size", &bdev.MemoryError{Size: total + ns.Size, Memory: ram,
					What: "memory namespaces up to this one, together"})
			}
			total += ns.Size
		}
	}
	return nil
}

// CheckBackends checks every enabled namespace's backend of tree as
// Apply would open it (bdev.Check, CheckMemory) without opening or creating
// anything, and returns every error placed at its FILE:LINE. nvmetd
// --check runs it.
func CheckBackends(tree *configfs.Tree) error {
	var all []nsRef
	for _, s := range tree.Subsystems {
		for _, ns := range s.Namespaces {
			if ns.Enable { // a disabled namespace opens nothing (disabled.go)
				all = append(all, nsRef{s.NQN, ns})
			}
		}
	}
	return checkBackends(tree, all)
}

// nsRef is a namespace of tree's subsystem nqn.
type nsRef struct {
	nqn string
	ns  *configfs.Namespace
}

// checkBackends checks the memory backends of tree together
// (CheckMemory) and the backends of nss each (bdev.Check), and returns
// every error placed at its FILE:LINE.
func checkBackends(tree *configfs.Tree, nss []nsRef) error {
	errs := []error{CheckMemory(tree)}
	for _, o := range nss {
		var me *bdev.MemoryError
		if err := bdev.Check(nsSpec(o.ns)); err != nil && !errors.As(err, &me) { // CheckMemory's
			errs = append(errs, tree.NamespaceError(o.nqn, o.ns, backendAttr(o.ns), err))
		}
	}
	return errors.Join(errs...)
}

// subsystemConfig maps a configfs subsystem onto a target.SubsystemConfig.
func subsystemConfig(s *configfs.Subsystem) target.SubsystemConfig {
	lo, hi := s.EffectiveCntlidRange()
	v, _ := parseVersion(s.EffectiveVersion())
	return target.SubsystemConfig{
		NQN:              s.NQN,
		Serial:           s.Serial,
		Model:            s.Model,
		FirmwareRevision: s.Firmware,
		Version:          v,
		AllowAnyHost:     s.AllowAnyHost,
		AllowedHosts:     s.AllowedHosts,
		CntlIDMin:        lo,
		CntlIDMax:        hi,
		MaxIOQueues:      s.QIDMax,
		MaxControllers:   s.MaxControllers,

		MaxControllersPerHost: s.MaxControllersPerHost,
	}
}

// parseVersion parses "major.minor[.tertiary]".
func parseVersion(s string) (fabrics.VS, error) {
	parts := strings.Split(s, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return 0, fmt.Errorf("version %q: want major.minor[.tertiary]", s)
	}
	var n [3]uint64
	for i, p := range parts {
		v, err := strconv.ParseUint(p, 10, 16)
		if err != nil || (i > 0 && v > 255) {
			return 0, fmt.Errorf("version %q: bad number %q", s, p)
		}
		n[i] = v
	}
	return fabrics.MakeVS(uint16(n[0]), uint8(n[1]), uint8(n[2])), nil
}

// addConfigNamespace adds a namespace on its opened backend dev (closed
// on error).
func (rc *Reconciler) addConfigNamespace(nqn string, ns *configfs.Namespace, dev bdev.Device) error {
	uuid, nguid, eui := ns.IDs(nqn)
	err := rc.t.AddNamespace(nqn, target.NamespaceConfig{
		NSID:     ns.NSID,
		Device:   dev,
		UUID:     [16]byte(uuid),
		NGUID:    [16]byte(nguid),
		EUI64:    [8]byte(eui),
		Disabled: !ns.Enable,
		ANAGrpID: ns.EffectiveANAGrpID(),
		// Reservations: toggling resv_enable replaces the namespace
		// (sameBackend), dropping its registrations.
		Reservations:    ns.ResvEnable,
		ReservationFile: ns.ResvPTPLFile,
	})
	if err != nil {
		dev.Close()
	}
	return err
}

// onlyEnableDiffers reports whether two versions of a namespace differ in
// their enable attribute alone: then the backend stays open.
func onlyEnableDiffers(a, b *configfs.Namespace) bool {
	if a == nil || b == nil {
		return false
	}
	return sameBackend(a, b) && a.Size == b.Size && a.Grow == b.Grow
}

// anaGroupStates maps a configfs port's ANA groups.
func anaGroupStates(p *configfs.Port) ([]target.ANAGroupState, error) {
	var out []target.ANAGroupState
	for _, g := range p.ANAGroups {
		s, ok := nvme.ParseANAState(g.State)
		if !ok {
			return nil, fmt.Errorf("target: port %s: ANA group %d: state %q: %w", p.ID, g.GrpID, g.State, target.ErrInvalid)
		}
		out = append(out, target.ANAGroupState{GrpID: g.GrpID, State: s})
	}
	return out, nil
}

// portConfig maps a configfs port onto a target.PortConfig.
func (rc *Reconciler) portConfig(p *configfs.Port, id uint16) (target.PortConfig, error) {
	cfg := target.PortConfig{ID: id, Name: p.ID, InlineDataSize: p.EffectiveInlineDataSize()}
	cfg.Address.Transport = p.Trtype
	if p.Traddr != "" {
		a, err := netip.ParseAddr(p.Traddr)
		if err != nil {
			return cfg, fmt.Errorf("target: port %s: address %q: %w", p.ID, p.Traddr, target.ErrInvalid)
		}
		cfg.Address.Addr = a
	}
	svc := p.Trsvcid
	if svc == "" {
		svc = configfs.DefaultTrsvcid
	}
	n, err := strconv.ParseUint(svc, 10, 16)
	if err != nil {
		return cfg, fmt.Errorf("target: port %s: service %q: %w", p.ID, p.Trsvcid, target.ErrInvalid)
	}
	cfg.Address.ServiceID = uint16(n)
	switch p.Treq {
	case configfs.TreqRequired:
		cfg.TREQ = fabrics.TREQRequired | fabrics.TREQDisableSQFlow
	case configfs.TreqNotRequired:
		cfg.TREQ = fabrics.TREQNotRequired | fabrics.TREQDisableSQFlow
	default:
		cfg.TREQ = fabrics.TREQDisableSQFlow
	}
	if cfg.ANAGroups, err = anaGroupStates(p); err != nil {
		return cfg, err
	}
	for _, nqn := range p.Subsystems {
		if rc.t.HasSubsystem(nqn) { // one that failed to add is left out
			cfg.Subsystems = append(cfg.Subsystems, nqn)
		}
	}
	return cfg, nil
}

func dropSubsystem(tr *configfs.Tree, nqn string) {
	for i, s := range tr.Subsystems {
		if s.NQN == nqn {
			tr.Subsystems = append(tr.Subsystems[:i:i], tr.Subsystems[i+1:]...)
			break
		}
	}
	for _, p := range tr.Ports {
		dropLink(tr, p.ID, nqn)
	}
}

func dropNamespace(tr *configfs.Tree, nqn string, nsid uint32) {
	s := tr.Subsystem(nqn)
	if s == nil {
		return
	}
	for i, ns := range s.Namespaces {
		if ns.NSID == nsid {
			s.Namespaces = append(s.Namespaces[:i:i], s.Namespaces[i+1:]...)
			return
		}
	}
}

func dropLink(tr *configfs.Tree, port, nqn string) {
	p := tr.Port(port)
	if p == nil {
		return
	}
	for i, n := range p.Subsystems {
		if n == nqn {
			p.Subsystems = append(p.Subsystems[:i:i], p.Subsystems[i+1:]...)
			return
		}
	}
}

func dropPort(tr *configfs.Tree, name string) {
	for i, p := range tr.Ports {
		if p.ID == name {
			tr.Ports = append(tr.Ports[:i:i], tr.Ports[i+1:]...)
			return
		}
	}
}
