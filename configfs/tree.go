package configfs

import (
	"net/netip"
	"slices"
	"strconv"

	"github.com/hashicorp/hcl/v2"
)

// Transport types (addr_trtype values).
const (
	TransportRDMA = "rdma"
	TransportTCP  = "tcp"
	TransportLoop = "loop"
)

// Address families (addr_adrfam values).
const (
	AdrfamIPv4 = "ipv4"
	AdrfamIPv6 = "ipv6"
)

// RDMA providers (our provider attribute; the names of package
// rdma/provider).
const (
	ProviderSoft    = "soft"    // pure-Go RoCEv2 over UDP
	ProviderIBVerbs = "ibverbs" // libibverbs and librdmacm, build tag ibverbs
	// ProviderAuto, the default, is ibverbs when the binary has it and an
	// RDMA device holds the port's address (or device names one), else
	// soft.
	ProviderAuto = "auto"
)

// MaxTOS is the largest tos: the IP type of service is one byte.
const MaxTOS = 255

// MaxConnectTimeout bounds connect_timeout (seconds).
const MaxConnectTimeout = 3600

// MaxPending bounds max_pending and max_pending_per_host.
const MaxPending = 65536

// MaxSRQSize bounds srq_size (as Linux's nvmet-rdma srq_size).
const MaxSRQSize = 65535

// Transport requirements (addr_treq values, as the kernel names them).
const (
	TreqNotSpecified = "not specified"
	TreqRequired     = "required"
	TreqNotRequired  = "not required"
)

// Backend kinds (our backend attribute; the same names as package
// target/bdev).
const (
	BackendFile   = "file"
	BackendBlock  = "block"
	BackendMemory = "memory"
	BackendNull   = "null"
	// BackendRBD is a Ceph RBD image (nvmetd HCL only; needs an nvmetd
	// built with -tags rbd).
	BackendRBD = "rbd"
)

// Defaults.
const (
	DefaultTrsvcid        = "4420"
	DefaultInlineDataSize = 8192
	// MaxInlineDataSize is the largest param_inline_data_size: 16 KiB, the
	// kernel's NVMET_RDMA_MAX_INLINE_DATA_SIZE on 4 KiB-page machines.
	MaxInlineDataSize = 16384
	DefaultVersion    = "1.3"
	DefaultCntlidMin  = 1
	// DefaultCntlidMax is NVME_CNTLID_MAX, the largest controller ID
	// (0xFFF0 and up are reserved).
	DefaultCntlidMax = 0xffef
	// MaxQIDMax bounds attr_qid_max: the largest I/O queue ID.
	MaxQIDMax       = 0xfffe
	DefaultLogLevel = "info"
	// MaxNSID is the largest namespace ID (0xFFFFFFFF means all
	// namespaces).
	MaxNSID = 0xfffffffe
)

// Length limits of subsystem attributes (the kernel's NVMET_SN_MAX_SIZE,
// NVMET_MN_MAX_SIZE and NVMET_FR_MAX_SIZE: the Identify Controller fields).
const (
	MaxSerialLen   = 20
	MaxModelLen    = 40
	MaxFirmwareLen = 8
)

// Tree is the whole target configuration: what /sys/kernel/config/nvmet
// holds for the kernel target, plus the daemon's log level. Slices keep the
// order of the source file.
type Tree struct {
	LogLevel   string // log_level: trace, debug, info, warn, error or off
	Ports      []*Port
	Subsystems []*Subsystem
	Hosts      []*Host

	src  *source
	file string // the nvmetcli JSON file loaded, for Warnings
	// json is the nvmetcli JSON loaded, walked for positions only when
	// a program's error needs one (Tree.NamespaceError, jsonPlaces).
	json []byte
	// loadWarns are the loader's warnings that validation cannot find
	// again (keys of nvmetcli JSON it ignored), for Warnings.
	loadWarns Errors
}

// Port is ports/<id>: a transport address the target listens on and the
// subsystems it exports there.
type Port struct {
	// ID names the port. The kernel names ports by a number (its
	// addr_portid); we allow any label and keep the number in PortID.
	ID string
	// PortID is addr_portid, the PORTID of discovery log entries. 0 means
	// the ID when it is a number, else the next free number (PortIDs).
	PortID  uint16
	Trtype  string // addr_trtype: rdma, tcp or loop
	Adrfam  string // addr_adrfam: ipv4 or ipv6; loaders derive it from Traddr
	Traddr  string // addr_traddr: an IP address (RDMA: the device's GID)
	Trsvcid string // addr_trsvcid: the service (port) number, default 4420
	Treq    string // addr_treq: transport requirements
	// InlineDataSize is param_inline_data_size: in-capsule data bytes.
	// Negative lets the transport choose (DefaultInlineDataSize), as in
	// the kernel.
	InlineDataSize int
	// Provider picks the RDMA implementation: soft, ibverbs or auto
	// (ProviderAuto; "" means auto too).
	Provider string
	// Device names the rdma-core device ("mlx5_0", "rxe0") the port
	// uses; empty means the one whose GID table holds Traddr. It needs
	// ibverbs: an error with provider soft, and it makes auto ibverbs.
	Device string
	// TOS is the IP type of service (DSCP << 2 | ECN, 0..255) of the
	// port's RDMA or TCP connections; negative leaves the default.
	TOS int
	// ConnectTimeout is how many seconds a queue may take from its CM
	// REQ to a successful Fabrics Connect before the port closes it
	// (nvmetd only; Linux has none); 0: the transport's 10.
	ConnectTimeout int
	// MaxPending and MaxPendingPerHost bound the queues between CM REQ
	// and Fabrics Connect, in total and per host address (nvmetd only);
	// 0: the transport's 256 and 128.
	MaxPending, MaxPendingPerHost int
	// DataPoolSize caps the bytes of the port's data staging pool, the
	// RDMA READ and WRITE buffers its queues share (nvmetd only); 0: the
	// transport's 64 MiB.
	DataPoolSize int64
	// SRQSize is the number of command capsule buffers of the port's
	// shared receive queue (nvmetd only): 0 for none (a receive ring
	// per queue), negative for the transport's 1024.
	SRQSize int
	// Subsystems lists the NQNs of the subsystems exported here
	// (ports/<id>/subsystems/ symlinks).
	Subsystems []string
	// ANAGroups are ports/<id>/ana_groups/<grpid>: the port's ANA state
	// of each group, in grpid order. Group 1 is always there (optimized
	// unless set otherwise), as in Linux; a group a namespace uses but
	// the port does not list is inaccessible through the port.
	ANAGroups []ANAGroup
	// Congestion is the port's RoCEv2 congestion control (the HCL
	// congestion block; provider soft only); nil: none, the provider's
	// default (off).
	Congestion *Congestion

	src *source
}

// ANA group states (ana_groups/<grpid>/ana_state values, as Linux names
// them).
const (
	ANAOptimized      = "optimized"
	ANANonOptimized   = "non-optimized"
	ANAInaccessible   = "inaccessible"
	ANAPersistentLoss = "persistent-loss"
	ANAChange         = "change"
)

// ANAStates lists the ANA states a port may give a group, in the order
// of their NVMe values.
var ANAStates = []string{ANAOptimized, ANANonOptimized, ANAInaccessible, ANAPersistentLoss, ANAChange}

// DefaultANAGroup is the ANA group every port has and namespaces are in
// unless they say otherwise (Linux NVMET_DEFAULT_ANA_GRPID).
const DefaultANAGroup = 1

// MaxANAGroups is the largest ANA group ID (Linux NVMET_MAX_ANAGRPS): it
// is also the target's ANAGRPMAX and NANAGRPID.
const MaxANAGroups = 128

// ANAGroup is a port's state of one ANA group.
type ANAGroup struct {
	GrpID uint32 // 1..MaxANAGroups
	State string // ANAOptimized, ANANonOptimized, ...
}

// Subsystem is subsystems/<nqn>.
type Subsystem struct {
	NQN          string
	AllowAnyHost bool   // attr_allow_any_host
	Serial       string // attr_serial; empty: the target derives one
	Model        string // attr_model; empty: the target's default
	Firmware     string // attr_firmware; empty: the target's version
	Version      string // attr_version, "major.minor[.tertiary]"; empty: 1.3
	CntlidMin    uint16 // attr_cntlid_min; 0: 1
	CntlidMax    uint16 // attr_cntlid_max; 0: 0xffef
	// QIDMax is attr_qid_max: the I/O queues a controller grants (a
	// host's queues per controller); 0: the target's 128.
	QIDMax int
	// MaxControllers bounds the subsystem's controllers (nvmetd HCL
	// only; Linux has no such attribute); 0: the target's 1024.
	MaxControllers int
	// MaxControllersPerHost bounds the controllers one host NQN has in
	// the subsystem at once (nvmetd HCL only); 0: the target's 16.
	MaxControllersPerHost int
	// AllowedHosts lists host NQNs (allowed_hosts/ symlinks into hosts/).
	AllowedHosts []string
	Namespaces   []*Namespace

	src *source
}

// Namespace is subsystems/<nqn>/namespaces/<nsid>.
type Namespace struct {
	NSID       uint32
	Backend    string // file, block, memory or null
	DevicePath string // device_path: the file or device node
	// Size in bytes: required for memory and null and to create a file;
	// 0 means the file's or device's size.
	Size int64
	// BlockSize is the logical block size; 0 means 512, or the device's
	// logical block size for block.
	BlockSize uint32
	Grow      bool // extend an existing smaller file to Size
	// DeviceUUID, DeviceNGUID and DeviceEUI64 are the namespace
	// identifiers; zero means derived (see IDs).
	DeviceUUID  UUID
	DeviceNGUID NGUID
	DeviceEUI64 EUI64
	Enable      bool // enable
	BufferedIO  bool // buffered_io: keep files and block devices off O_DIRECT
	// QueueDepth is queue_depth (nvmetd only): the bound on I/Os in
	// flight to a file or block backend, 1..MaxQueueDepth; 0 means
	// DefaultQueueDepth.
	QueueDepth int
	// ResvEnable is resv_enable: persistent reservations (off by
	// default, as in Linux; docs/reservations.md).
	ResvEnable bool
	// ANAGrpID is ana_grpid: the namespace's ANA group; 0 means
	// DefaultANAGroup.
	ANAGrpID uint32
	// ResvPTPLFile is resv_ptpl_file (nvmetd only; SPDK's ptpl_file):
	// where reservations persist through power loss when a host asks;
	// "" means PTPL is not supported.
	ResvPTPLFile string

	// Ceph RBD (backend rbd; nvmetd HCL only): the image Image in pool
	// Pool of the cluster CephConf names, as client ClientID ("" means
	// admin) with the keyring Keyring ("" means the conf's).
	Pool, Image, CephConf, ClientID, Keyring string

	src *source
}

// Host is hosts/<nqn>: a host that subsystems may list in AllowedHosts.
type Host struct {
	NQN string

	// DH-HMAC-CHAP (hosts/<nqn>/dhchap_*; auth.go). A secret read from a
	// *_file attribute keeps the file name to write back.
	DHCHAPKey         Secret // dhchap_key: the host's DHHC-1 secret
	DHCHAPKeyFile     string // dhchap_key_file (nvmetd HCL only)
	DHCHAPCtrlKey     Secret // dhchap_ctrl_key: the controller's, for bidirectional authentication
	DHCHAPCtrlKeyFile string // dhchap_ctrl_key_file (nvmetd HCL only)
	DHCHAPHash        string // dhchap_hash; "" means hmac(sha256)
	DHCHAPDHGroup     string // dhchap_dhgroup; "" means null

	// implicit marks a host the HCL loader created because a subsystem's
	// allowed_hosts names it without a host block; Tree.HCL leaves it
	// out again.
	implicit bool
	src      *source
}

// source remembers where an object and its attributes were written, so
// validation errors can point at them.
type source struct {
	block hcl.Range // the block header (type and labels)
	label hcl.Range // the label naming the object
	// attrs maps a configfs attribute name to the attribute as written.
	attrs map[string]srcAttr
	// bad holds attributes whose value failed to decode: validation
	// skips them rather than report the same attribute twice.
	bad map[string]bool
	// sub holds the sources of nested blocks without an object of their
	// own, by key (a port's ana_group blocks: anaGroupKey).
	sub map[string]*source
}

// subSource returns the source of the nested block key, or nil.
func (s *source) subSource(key string) *source {
	if s == nil {
		return nil
	}
	return s.sub[key]
}

type srcAttr struct {
	name string    // the attribute name in the source
	rng  hcl.Range // the attribute's value
}

// NewPort returns a port with the defaults: rdma over the auto provider,
// service 4420, transport-chosen inline data size, the provider's TOS.
func NewPort(id string) *Port {
	return &Port{
		ID:             id,
		Trtype:         TransportRDMA,
		Provider:       ProviderAuto,
		Trsvcid:        DefaultTrsvcid,
		Treq:           TreqNotSpecified,
		InlineDataSize: -1,
		TOS:            -1,
		SRQSize:        -1,
	}
}

// NewSubsystem returns a subsystem with the kernel's defaults.
func NewSubsystem(nqn string) *Subsystem {
	return &Subsystem{NQN: nqn, Version: DefaultVersion, CntlidMin: DefaultCntlidMin, CntlidMax: DefaultCntlidMax}
}

// NewNamespace returns an enabled namespace.
func NewNamespace(nsid uint32) *Namespace {
	return &Namespace{NSID: nsid, Enable: true}
}

// Port returns the port named id, or nil.
func (t *Tree) Port(id string) *Port {
	for _, p := range t.Ports {
		if p.ID == id {
			return p
		}
	}
	return nil
}

// Subsystem returns the subsystem named nqn, or nil.
func (t *Tree) Subsystem(nqn string) *Subsystem {
	for _, s := range t.Subsystems {
		if s.NQN == nqn {
			return s
		}
	}
	return nil
}

// Host returns the host named nqn, or nil.
func (t *Tree) Host(nqn string) *Host {
	for _, h := range t.Hosts {
		if h.NQN == nqn {
			return h
		}
	}
	return nil
}

// PortsOf returns the ports that export the subsystem nqn.
func (t *Tree) PortsOf(nqn string) []*Port {
	var ports []*Port
	for _, p := range t.Ports {
		if slices.Contains(p.Subsystems, nqn) {
			ports = append(ports, p)
		}
	}
	return ports
}

// Namespace returns the namespace nsid, or nil.
func (s *Subsystem) Namespace(nsid uint32) *Namespace {
	for _, ns := range s.Namespaces {
		if ns.NSID == nsid {
			return ns
		}
	}
	return nil
}

// EffectiveVersion returns Version, or DefaultVersion when empty.
func (s *Subsystem) EffectiveVersion() string {
	if s.Version == "" {
		return DefaultVersion
	}
	return s.Version
}

// EffectiveCntlidRange returns CntlidMin and CntlidMax with zero values
// replaced by the defaults.
func (s *Subsystem) EffectiveCntlidRange() (lo, hi uint16) {
	lo, hi = s.CntlidMin, s.CntlidMax
	if lo == 0 {
		lo = DefaultCntlidMin
	}
	if hi == 0 {
		hi = DefaultCntlidMax
	}
	return lo, hi
}

// ANAState returns the port's state of ANA group grpid: the state
// ANAGroups gives it, optimized for DefaultANAGroup when they do not, ""
// for another group they do not list.
func (p *Port) ANAState(grpid uint32) string {
	for _, g := range p.ANAGroups {
		if g.GrpID == grpid {
			return g.State
		}
	}
	if grpid == DefaultANAGroup {
		return ANAOptimized
	}
	return ""
}

// EffectiveANAGroups returns the port's ANA groups as the port has them:
// in grpid order, with DefaultANAGroup (optimized when ANAGroups leave it
// out).
func (p *Port) EffectiveANAGroups() []ANAGroup {
	gs := slices.Clone(p.ANAGroups)
	if !slices.ContainsFunc(gs, func(g ANAGroup) bool { return g.GrpID == DefaultANAGroup }) {
		gs = append(gs, ANAGroup{GrpID: DefaultANAGroup, State: ANAOptimized})
	}
	sortANAGroups(gs)
	return gs
}

// EffectiveANAGrpID is the namespace's ANA group: ANAGrpID, or
// DefaultANAGroup when that is 0.
func (ns *Namespace) EffectiveANAGrpID() uint32 {
	if ns.ANAGrpID == 0 {
		return DefaultANAGroup
	}
	return ns.ANAGrpID
}

// EffectiveInlineDataSize returns InlineDataSize, or DefaultInlineDataSize
// when negative.
func (p *Port) EffectiveInlineDataSize() int {
	if p.InlineDataSize < 0 {
		return DefaultInlineDataSize
	}
	return p.InlineDataSize
}

// EffectiveProvider returns Provider, or ProviderAuto when empty.
func (p *Port) EffectiveProvider() string {
	if p.Provider == "" {
		return ProviderAuto
	}
	return p.Provider
}

// DerivedAdrfam returns the address family of Traddr ("ipv4" or "ipv6"), or
// "" when Traddr is not an IP address.
func (p *Port) DerivedAdrfam() string {
	a, err := netip.ParseAddr(p.Traddr)
	switch {
	case err != nil:
		return ""
	case a.Is4():
		return AdrfamIPv4
	default:
		return AdrfamIPv6
	}
}

// PortIDs returns the addr_portid of every port by ID: PortID when set,
// else the ID when it is a decimal number, else the smallest number from 1
// up that no other port uses, in tree order.
func (t *Tree) PortIDs() map[string]uint16 {
	ids := make(map[string]uint16, len(t.Ports))
	used := make(map[uint16]bool)
	for _, p := range t.Ports {
		if id, ok := explicitPortID(p); ok {
			ids[p.ID] = id
			used[id] = true
		}
	}
	next := uint16(1)
	for _, p := range t.Ports {
		if _, ok := explicitPortID(p); ok {
			continue
		}
		for used[next] && next < 0xffff {
			next++
		}
		ids[p.ID] = next
		used[next] = true
	}
	return ids
}

func explicitPortID(p *Port) (uint16, bool) {
	if p.PortID != 0 {
		return p.PortID, true
	}
	if n, err := strconv.ParseUint(p.ID, 10, 16); err == nil {
		return uint16(n), true
	}
	return 0, false
}

// Clone returns a deep copy of the tree.
func (t *Tree) Clone() *Tree {
	if t == nil {
		return nil
	}
	c := &Tree{LogLevel: t.LogLevel, src: t.src, file: t.file, json: t.json, loadWarns: t.loadWarns}
	for _, p := range t.Ports {
		cp := *p
		cp.Subsystems = slices.Clone(p.Subsystems)
		cp.ANAGroups = slices.Clone(p.ANAGroups)
		if p.Congestion != nil {
			cc := *p.Congestion
			cp.Congestion = &cc
		}
		c.Ports = append(c.Ports, &cp)
	}
	for _, s := range t.Subsystems {
		cs := *s
		cs.AllowedHosts = slices.Clone(s.AllowedHosts)
		cs.Namespaces = nil
		for _, ns := range s.Namespaces {
			cns := *ns
			cs.Namespaces = append(cs.Namespaces, &cns)
		}
		c.Subsystems = append(c.Subsystems, &cs)
	}
	for _, h := range t.Hosts {
		ch := *h
		c.Hosts = append(c.Hosts, &ch)
	}
	return c
}

// Queue depth of file and block namespaces (Namespace.QueueDepth).
const (
	DefaultQueueDepth = 128
	MaxQueueDepth     = 4096
)

// EffectiveQueueDepth is the queue depth a file or block backend runs
// with: QueueDepth, or DefaultQueueDepth when it is 0.
func (ns *Namespace) EffectiveQueueDepth() int {
	if ns.QueueDepth == 0 {
		return DefaultQueueDepth
	}
	return ns.QueueDepth
}
