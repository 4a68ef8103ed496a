package target

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/target/bdev"
)

// Defaults, as the Linux target (drivers/nvme/target/nvmet.h) has them.
const (
	// DefaultMaxQueueSize is the largest queue a host may open (CAP.MQES
	// + 1; Linux NVMET_MAX_QUEUE_SIZE / NVMET_QUEUE_SIZE).
	DefaultMaxQueueSize = 1024
	// DefaultMaxIOQueues is the number of I/O queues a controller grants
	// at most (Linux NVMET_NR_QUEUES).
	DefaultMaxIOQueues = 128
	// DefaultCntlIDMin and DefaultCntlIDMax bound dynamic controller IDs
	// (Linux NVME_CNTLID_MIN, NVME_CNTLID_MAX).
	DefaultCntlIDMin = 1
	DefaultCntlIDMax = 0xffef
	// DefaultMaxControllers bounds a subsystem's controllers when its
	// configuration sets no bound (Linux and SPDK have none but the
	// controller ID range; docs/target-limits.md).
	DefaultMaxControllers = 1024
	// DefaultMaxControllersPerHost bounds the controllers one host NQN
	// has at once in one subsystem (the discovery subsystem included):
	// a host has one per path, and a few more while it reconnects.
	DefaultMaxControllersPerHost = 16
	// DefaultModel is the model number of subsystems that set none.
	DefaultModel = "nvmeof"
	// DefaultFirmwareRevision is the firmware revision reported when the
	// subsystem sets none.
	DefaultFirmwareRevision = "0.1"
	// DefaultWorkersPerNamespace is the size of each namespace's pool of
	// I/O goroutines. File, block and RBD namespaces run their common
	// commands asynchronously (bdev.Async, up to the namespace's queue
	// depth) and use the workers only for Compare, Verify and a Flush of
	// every namespace; a backend without Async runs everything on them.
	DefaultWorkersPerNamespace = 4
	// DiscoveryKATO is the keep-alive timeout a discovery controller gets
	// when the host asks for none (Linux NVMET_DISC_KATO_MS).
	DiscoveryKATO = 120000 // ms
	// MaxNamespaces is the most namespaces a subsystem holds, and the
	// least NN it reports (Linux NVMET_MAX_NAMESPACES). NSIDs may be
	// larger: NN is then the largest NSID.
	MaxNamespaces = 1024
)

// Options configure a Target.
type Options struct {
	// Logger receives the target's logs; a named sub-logger "target" is
	// used. Nil discards logs.
	Logger hclog.Logger
	// DiscoveryNQN is the NQN of the discovery subsystem. Connects to the
	// well-known fabrics.DiscoveryNQN are accepted as well. Empty means
	// fabrics.DiscoveryNQN.
	DiscoveryNQN string
	// MaxQueueSize is the default largest queue (entries) of a port; 0
	// means DefaultMaxQueueSize.
	MaxQueueSize int
	// WorkersPerNamespace is the number of goroutines that run backend
	// I/O for each namespace; 0 means DefaultWorkersPerNamespace.
	WorkersPerNamespace int
	// AuthTimeout bounds a DH-HMAC-CHAP transaction: a queue not
	// authenticated by then is refused. 0 means the controller's KATO, or
	// DefaultAuthTimeout without one (Linux).
	AuthTimeout time.Duration
	// AuthDeadline bounds the time from a queue's Connect to the end of
	// its first authentication, when it must authenticate: a queue still
	// unauthenticated then is closed (an admin queue with its
	// controller), so that a peer without the key holds nothing for
	// long. The shorter of it and AuthTimeout applies. 0 means
	// DefaultAuthDeadline.
	AuthDeadline time.Duration
	// HealthPollInterval is how often backends with health data are read
	// for SMART / Health critical-warning events while a controller has
	// them enabled (healthaen.go); 0 means DefaultHealthPollInterval, a
	// negative value never reads them (no such events).
	HealthPollInterval time.Duration
}

// Target is a transport-neutral NVMe over Fabrics target: subsystems with
// their namespaces and allowed hosts, ports that export subsystems, the
// discovery subsystem, and the controllers hosts create by connecting.
// Every method is safe for concurrent use; configuration may change while
// ports are served.
type Target struct {
	log     hclog.Logger
	opts    Options
	workers int

	mu     sync.RWMutex // configuration and the controller registry
	subsys map[string]*Subsystem
	ports  map[uint16]*Port
	disc   *Subsystem
	genctr uint64 // discovery log generation counter
	// anaChanged is the ANA log's change count (CHGCNT): it moves with
	// every ANA state or group change (Linux nvmet_ana_chgcnt).
	anaChanged atomic.Uint64
	closed     bool

	auth   targetAuth   // DH-HMAC-CHAP host keys (auth.go)
	stats  targetStats  // statistics switches (stats.go)
	health healthPoller // SMART / Health events (healthaen.go)
}

// New returns a target with no subsystems and no ports.
func New(opts Options) *Target {
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if opts.DiscoveryNQN == "" {
		opts.DiscoveryNQN = fabrics.DiscoveryNQN
	}
	if opts.MaxQueueSize <= 0 {
		opts.MaxQueueSize = DefaultMaxQueueSize
	}
	workers := opts.WorkersPerNamespace
	if workers <= 0 {
		workers = DefaultWorkersPerNamespace
	}
	t := &Target{
		log:     log.Named("target"),
		opts:    opts,
		workers: workers,
		subsys:  map[string]*Subsystem{},
		ports:   map[uint16]*Port{},
	}
	t.disc = newSubsystem(t, SubsystemConfig{
		NQN:          opts.DiscoveryNQN,
		AllowAnyHost: true,
		Model:        DefaultModel,
	}, true)
	return t
}

// Errors returned by the configuration methods; match them with errors.Is.
var (
	ErrExists   = errors.New("target: already exists")
	ErrNotFound = errors.New("target: not found")
	ErrInvalid  = errors.New("target: invalid configuration")
	ErrClosed   = errors.New("target: closed")
)

// SubsystemConfig describes an NVM subsystem.
type SubsystemConfig struct {
	// NQN names the subsystem. As in Linux nvmet it need not be a
	// conforming NQN, only a safe name (fabrics.CheckNQN); so for the
	// AllowedHosts.
	NQN string
	// Serial is the serial number (at most 20 ASCII characters); empty
	// means one derived from the NQN (stable across restarts).
	Serial string
	// Model is the model number (at most 40 characters); empty means
	// DefaultModel.
	Model string
	// FirmwareRevision (at most 8 characters); empty means
	// DefaultFirmwareRevision.
	FirmwareRevision string
	// IEEEOUI is the IEEE OUI identifier (24 bits).
	IEEEOUI uint32
	// Version is the NVMe version reported in VS and Identify Controller
	// VER (Linux attr_version); 0 means 1.3, as Linux.
	Version fabrics.VS
	// AllowAnyHost lets every host connect; otherwise only AllowedHosts.
	AllowAnyHost bool
	// AllowedHosts are the host NQNs that may connect.
	AllowedHosts []string
	// CntlIDMin and CntlIDMax bound the controller IDs given out; zero
	// means DefaultCntlIDMin and DefaultCntlIDMax.
	CntlIDMin, CntlIDMax uint16
	// MaxIOQueues is the most I/O queues a controller grants; 0 means
	// DefaultMaxIOQueues (Linux attr_qid_max).
	MaxIOQueues int
	// MaxControllers bounds the controllers the subsystem has at once;
	// an admin Connect beyond it fails with Connect Controller Busy, as
	// one beyond the controller ID range does. 0 means
	// DefaultMaxControllers.
	MaxControllers int
	// MaxControllersPerHost bounds the controllers one host NQN has at
	// once in the subsystem (Connect Controller Busy beyond it). 0 means
	// DefaultMaxControllersPerHost.
	MaxControllersPerHost int
}

// NamespaceConfig describes a namespace of a subsystem.
type NamespaceConfig struct {
	NSID uint32 // 1 to FFFFFFFEh
	// Device is the backend. Once AddNamespace succeeds the target owns
	// it and closes it when the namespace is removed or the target is
	// closed; when AddNamespace fails the caller keeps it.
	Device bdev.Device
	// BlockSize is the logical block size the namespace exposes; 0 means
	// the device's. It must be a power of two, a multiple of the device's
	// block size, and divide the device's size.
	BlockSize uint32
	// UUID, NGUID and EUI64 identify the namespace; a zero UUID is
	// replaced by a random one (as Linux nvmet does); zero NGUID and EUI64
	// are not reported.
	UUID  [16]byte
	NGUID [16]byte
	EUI64 [8]byte
	// Disabled keeps the namespace inactive (Linux: enable = 0).
	Disabled bool
	// ReadOnly rejects writes with Namespace Is Write Protected.
	ReadOnly bool
	// Reservations enables persistent reservations (Linux resv_enable;
	// reservation.go).
	Reservations bool
	// ANAGrpID is the namespace's ANA group (ana.go); 0 means
	// DefaultANAGroup.
	ANAGrpID uint32
	// ReservationFile, with Reservations, is where registrations and the
	// reservation persist through power loss when a host asks (CPTPL;
	// SPDK's ptpl_file); "" reports PTPL unsupported. It is read when the
	// namespace is created.
	ReservationFile string
}

// PortConfig describes a port: an address hosts reach the target at, and
// the subsystems it exports.
type PortConfig struct {
	// ID is the port identifier (PORTID of discovery log entries).
	ID uint16
	// Name is the port's name in the configuration (for logs).
	Name string
	// Address is where the port listens (the transport serves it).
	Address fabrics.Address
	// InlineDataSize is the in-capsule data size the transport accepts on
	// I/O queues: it sets IOCCSZ and the SGL offset support bit.
	InlineDataSize int
	// MaxQueueSize is the largest queue a host may open (CAP.MQES + 1),
	// which should not exceed what the transport accepts. 0 means 128
	// for RDMA (Linux NVME_RDMA_MAX_QUEUE_SIZE, what nvmet-rdma reports)
	// and Options.MaxQueueSize for other transports.
	MaxQueueSize int
	// TREQ is the discovery log entry's transport requirements; 0 means
	// fabrics.TREQDisableSQFlow (as Linux configfs sets it).
	TREQ uint8
	// Subsystems are the NQNs of the subsystems exported through the port.
	Subsystems []string
	// ANAGroups are the port's ANA group states (ana.go); group 1 is
	// optimized unless they say otherwise, a group they leave out is
	// inaccessible through the port.
	ANAGroups []ANAGroupState
}

// DerivedSerial returns 20 hex digits of SHA-256 of the NQN: a serial
// number that stays the same across restarts (Linux picks a random one).
func DerivedSerial(nqn string) string {
	h := sha256.Sum256([]byte("serial:" + nqn))
	return hex.EncodeToString(h[:10])
}

// validHostNQN and normalize accept what Linux nvmet accepts: any name
// fabrics.CheckNQN finds safe, conforming NQN or not (nvmetcli
// configurations use names like "testnqn"). Configuration loaders warn
// about the non-conforming ones (configfs.Tree.Warnings).
func validHostNQN(h string) error {
	if _, err := fabrics.CheckNQN(h); err != nil {
		return fmt.Errorf("host NQN %q: %w: %w", h, ErrInvalid, err)
	}
	return nil
}

func (c *SubsystemConfig) normalize() error {
	if _, err := fabrics.CheckNQN(c.NQN); err != nil {
		return fmt.Errorf("subsystem NQN %q: %w: %w", c.NQN, ErrInvalid, err)
	}
	if c.Model == "" {
		c.Model = DefaultModel
	}
	if c.Version == 0 {
		c.Version = fabrics.VS13
	}
	if c.Serial == "" {
		c.Serial = DerivedSerial(c.NQN)
	}
	if c.FirmwareRevision == "" {
		c.FirmwareRevision = DefaultFirmwareRevision
	}
	switch {
	case len(c.Serial) > 20:
		return fmt.Errorf("subsystem %s: serial %q longer than 20 characters: %w", c.NQN, c.Serial, ErrInvalid)
	case len(c.Model) > 40:
		return fmt.Errorf("subsystem %s: model %q longer than 40 characters: %w", c.NQN, c.Model, ErrInvalid)
	case len(c.FirmwareRevision) > 8:
		return fmt.Errorf("subsystem %s: firmware revision %q longer than 8 characters: %w", c.NQN, c.FirmwareRevision, ErrInvalid)
	case c.IEEEOUI > 0xffffff:
		return fmt.Errorf("subsystem %s: IEEE OUI %#x wider than 24 bits: %w", c.NQN, c.IEEEOUI, ErrInvalid)
	}
	if c.CntlIDMin == 0 {
		c.CntlIDMin = DefaultCntlIDMin
	}
	if c.CntlIDMax == 0 {
		c.CntlIDMax = DefaultCntlIDMax
	}
	if c.CntlIDMin > c.CntlIDMax || c.CntlIDMax > DefaultCntlIDMax {
		return fmt.Errorf("subsystem %s: controller ID range %d-%d: %w", c.NQN, c.CntlIDMin, c.CntlIDMax, ErrInvalid)
	}
	if c.MaxIOQueues == 0 {
		c.MaxIOQueues = DefaultMaxIOQueues
	}
	if c.MaxIOQueues < 1 || c.MaxIOQueues > 0xfffe {
		return fmt.Errorf("subsystem %s: %d I/O queues: %w", c.NQN, c.MaxIOQueues, ErrInvalid)
	}
	if c.MaxControllers < 0 {
		return fmt.Errorf("subsystem %s: %d controllers: %w", c.NQN, c.MaxControllers, ErrInvalid)
	}
	if c.MaxControllersPerHost < 0 {
		return fmt.Errorf("subsystem %s: %d controllers per host: %w", c.NQN, c.MaxControllersPerHost, ErrInvalid)
	}
	for _, h := range c.AllowedHosts {
		if err := validHostNQN(h); err != nil {
			return fmt.Errorf("subsystem %s: %w", c.NQN, err)
		}
	}
	c.AllowedHosts = slices.Clone(c.AllowedHosts)
	return nil
}

// AddSubsystem creates a subsystem.
func (t *Target) AddSubsystem(cfg SubsystemConfig) error {
	if err := cfg.normalize(); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	if cfg.NQN == t.disc.nqn || cfg.NQN == fabrics.DiscoveryNQN {
		return fmt.Errorf("target: subsystem %s: the discovery subsystem's NQN: %w", cfg.NQN, ErrInvalid)
	}
	if _, ok := t.subsys[cfg.NQN]; ok {
		return fmt.Errorf("target: subsystem %s: %w", cfg.NQN, ErrExists)
	}
	s := newSubsystem(t, cfg, false)
	t.subsys[cfg.NQN] = s
	t.log.Info("subsystem added", "nqn", cfg.NQN, "serial", cfg.Serial, "allow_any_host", cfg.AllowAnyHost)
	return nil
}

// UpdateSubsystem changes a subsystem's attributes and allowed hosts.
// Controllers already connected keep running; identity fields show in
// later Identify commands. A changed host list updates the discovery log.
func (t *Target) UpdateSubsystem(cfg SubsystemConfig) error {
	if err := cfg.normalize(); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s, err := t.subsystemLocked(cfg.NQN)
	if err != nil {
		return err
	}
	hostsChanged := cfg.AllowAnyHost != s.cfg.AllowAnyHost || !sameSet(cfg.AllowedHosts, s.cfg.AllowedHosts)
	s.cfg = cfg
	s.hosts = hostSet(cfg.AllowedHosts)
	if hostsChanged {
		t.discoveryChangedLocked(s, "")
	}
	t.log.Info("subsystem updated", "nqn", cfg.NQN)
	return nil
}

// RemoveSubsystem deletes a subsystem: its controllers are torn down, it
// is unlinked from every port and its namespaces' devices are closed.
func (t *Target) RemoveSubsystem(nqn string) error {
	t.mu.Lock()
	s, err := t.subsystemLocked(nqn)
	if err != nil {
		t.mu.Unlock()
		return err
	}
	delete(t.subsys, nqn)
	linked := false
	for _, p := range t.ports {
		if p.unlink(nqn) {
			linked = true
		}
	}
	if linked {
		t.discoveryChangedLocked(s, "")
	}
	ctrls := s.controllersLocked()
	nss := s.removeAllNamespaces()
	t.mu.Unlock()

	for _, c := range ctrls {
		c.shutdown("subsystem removed")
	}
	var errs []error
	for _, ns := range nss {
		errs = append(errs, ns.destroy())
	}
	t.log.Info("subsystem removed", "nqn", nqn)
	return errors.Join(errs...)
}

// HasSubsystem reports whether subsystem nqn exists.
func (t *Target) HasSubsystem(nqn string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	_, ok := t.subsys[nqn]
	return ok
}

// AllowHost adds a host NQN to a subsystem's allowed hosts.
func (t *Target) AllowHost(subsysNQN, hostNQN string) error {
	if err := validHostNQN(hostNQN); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s, err := t.subsystemLocked(subsysNQN)
	if err != nil {
		return err
	}
	if s.hosts[hostNQN] {
		return fmt.Errorf("target: subsystem %s: host %s: %w", subsysNQN, hostNQN, ErrExists)
	}
	s.hosts[hostNQN] = true
	s.cfg.AllowedHosts = append(s.cfg.AllowedHosts, hostNQN)
	if !s.cfg.AllowAnyHost {
		t.discoveryChangedLocked(s, hostNQN)
	}
	return nil
}

// DisallowHost removes a host NQN from a subsystem's allowed hosts. Its
// controllers already connected stay (as in Linux).
func (t *Target) DisallowHost(subsysNQN, hostNQN string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, err := t.subsystemLocked(subsysNQN)
	if err != nil {
		return err
	}
	if !s.hosts[hostNQN] {
		return fmt.Errorf("target: subsystem %s: host %s: %w", subsysNQN, hostNQN, ErrNotFound)
	}
	delete(s.hosts, hostNQN)
	s.cfg.AllowedHosts = slices.DeleteFunc(s.cfg.AllowedHosts, func(h string) bool { return h == hostNQN })
	if !s.cfg.AllowAnyHost {
		t.discoveryChangedLocked(s, hostNQN)
	}
	return nil
}

// SetAllowAnyHost changes a subsystem's allow_any_host attribute.
func (t *Target) SetAllowAnyHost(subsysNQN string, allow bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, err := t.subsystemLocked(subsysNQN)
	if err != nil {
		return err
	}
	if s.cfg.AllowAnyHost != allow {
		s.cfg.AllowAnyHost = allow
		t.discoveryChangedLocked(s, "")
	}
	return nil
}

// AddNamespace adds a namespace to a subsystem; when enabled, the
// subsystem's controllers get a Namespace Attribute Changed event.
func (t *Target) AddNamespace(subsysNQN string, cfg NamespaceConfig) error {
	if cfg.Device == nil {
		return fmt.Errorf("target: subsystem %s namespace %d: no device: %w", subsysNQN, cfg.NSID, ErrInvalid)
	}
	if cfg.NSID == 0 || cfg.NSID == nvme.NSIDAll {
		return fmt.Errorf("target: subsystem %s: NSID %d outside 1-FFFFFFFEh: %w", subsysNQN, cfg.NSID, ErrInvalid)
	}
	ns, err := newNamespace(t, subsysNQN, cfg)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s, err := t.subsystemLocked(subsysNQN)
	if err == nil && t.closed {
		err = ErrClosed
	}
	if err != nil {
		ns.stopWorkers()
		return err
	}
	if err := s.addNamespace(ns); err != nil {
		ns.stopWorkers()
		return err
	}
	t.log.Info("namespace added", "subsys", subsysNQN, "nsid", cfg.NSID,
		"size", ns.size.Load(), "block_size", ns.bs, "enabled", !cfg.Disabled)
	return nil
}

// RemoveNamespace deletes a namespace: new commands to it fail, commands
// in flight finish, then its device is closed. Controllers get a
// Namespace Attribute Changed event.
func (t *Target) RemoveNamespace(subsysNQN string, nsid uint32) error {
	t.mu.Lock()
	s, err := t.subsystemLocked(subsysNQN)
	if err != nil {
		t.mu.Unlock()
		return err
	}
	ns, err := s.removeNamespace(nsid)
	t.mu.Unlock()
	if err != nil {
		return err
	}
	t.log.Info("namespace removed", "subsys", subsysNQN, "nsid", nsid)
	return ns.destroy()
}

// SetNamespaceEnabled enables or disables a namespace (Linux: the enable
// attribute); controllers get a Namespace Attribute Changed event.
func (t *Target) SetNamespaceEnabled(subsysNQN string, nsid uint32, enabled bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, err := t.subsystemLocked(subsysNQN)
	if err != nil {
		return err
	}
	return s.setNamespaceEnabled(nsid, enabled)
}

// NamespaceChanged tells the target that a namespace's backend changed
// (e.g. it was resized): the size is read again and controllers get a
// Namespace Attribute Changed event.
func (t *Target) NamespaceChanged(subsysNQN string, nsid uint32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ns, err := t.namespaceLocked(subsysNQN, nsid)
	if err != nil {
		return err
	}
	ns.revalidate()
	s.nsChangedLocked(nsid)
	return nil
}

// rdmaMaxQueueSize is the largest RDMA queue (Linux NVME_RDMA_MAX_QUEUE_SIZE).
const rdmaMaxQueueSize = 128

func (c *PortConfig) normalize(def int) error {
	if c.MaxQueueSize == 0 {
		c.MaxQueueSize = def
		if c.Address.Transport == fabrics.TransportRDMA {
			c.MaxQueueSize = min(def, rdmaMaxQueueSize)
		}
	}
	if c.MaxQueueSize < 2 || c.MaxQueueSize > 0x10000 {
		return fmt.Errorf("target: port %d: queue size %d: %w", c.ID, c.MaxQueueSize, ErrInvalid)
	}
	if c.InlineDataSize < 0 {
		return fmt.Errorf("target: port %d: inline data size %d: %w", c.ID, c.InlineDataSize, ErrInvalid)
	}
	if c.TREQ == 0 {
		c.TREQ = fabrics.TREQDisableSQFlow
	}
	c.Subsystems = slices.Clone(c.Subsystems)
	if _, err := newANAStates(c.ANAGroups); err != nil {
		return fmt.Errorf("target: port %d: %w", c.ID, err)
	}
	c.ANAGroups = slices.Clone(c.ANAGroups)
	return nil
}

// AddPort creates a port. Its subsystems must exist.
func (t *Target) AddPort(cfg PortConfig) error {
	if err := cfg.normalize(t.opts.MaxQueueSize); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	if _, ok := t.ports[cfg.ID]; ok {
		return fmt.Errorf("target: port %d: %w", cfg.ID, ErrExists)
	}
	for _, n := range cfg.Subsystems {
		if _, ok := t.subsys[n]; !ok {
			return fmt.Errorf("target: port %d: subsystem %s: %w", cfg.ID, n, ErrNotFound)
		}
	}
	p := newPort(t, cfg)
	t.ports[cfg.ID] = p
	t.genctr++
	t.log.Info("port added", "port", cfg.ID, "name", cfg.Name, "addr", cfg.Address.String(), "subsystems", cfg.Subsystems)
	return nil
}

// UpdatePort changes a port's transport parameters and the subsystems it
// exports. Controllers of subsystems no longer exported are torn down;
// discovery controllers on the port get a Discovery Log Page Change event.
func (t *Target) UpdatePort(cfg PortConfig) error {
	if err := cfg.normalize(t.opts.MaxQueueSize); err != nil {
		return err
	}
	t.mu.Lock()
	p, ok := t.ports[cfg.ID]
	if !ok {
		t.mu.Unlock()
		return fmt.Errorf("target: port %d: %w", cfg.ID, ErrNotFound)
	}
	for _, n := range cfg.Subsystems {
		if _, ok := t.subsys[n]; !ok {
			t.mu.Unlock()
			return fmt.Errorf("target: port %d: subsystem %s: %w", cfg.ID, n, ErrNotFound)
		}
	}
	var drop []*controller
	for _, n := range p.cfg.Subsystems {
		if !slices.Contains(cfg.Subsystems, n) {
			drop = append(drop, p.controllersOfLocked(t.subsys[n])...)
		}
	}
	changed := p.cfg.Address != cfg.Address || p.cfg.TREQ != cfg.TREQ || !slices.Equal(p.cfg.Subsystems, cfg.Subsystems)
	ana, _ := newANAStates(cfg.ANAGroups) // normalize checked them
	p.cfg = cfg
	if changed {
		t.portChangedLocked(p)
	}
	t.setPortANALocked(p, ana)
	t.mu.Unlock()
	for _, c := range drop {
		c.shutdown("subsystem no longer exported by the port")
	}
	return nil
}

// LinkSubsystem exports a subsystem through a port.
func (t *Target) LinkSubsystem(portID uint16, subsysNQN string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.ports[portID]
	if !ok {
		return fmt.Errorf("target: port %d: %w", portID, ErrNotFound)
	}
	if _, err := t.subsystemLocked(subsysNQN); err != nil {
		return err
	}
	if slices.Contains(p.cfg.Subsystems, subsysNQN) {
		return fmt.Errorf("target: port %d: subsystem %s: %w", portID, subsysNQN, ErrExists)
	}
	p.cfg.Subsystems = append(p.cfg.Subsystems, subsysNQN)
	t.portChangedLocked(p)
	return nil
}

// UnlinkSubsystem stops exporting a subsystem through a port; its
// controllers on that port are torn down (as Linux nvmet_port_del_ctrls).
func (t *Target) UnlinkSubsystem(portID uint16, subsysNQN string) error {
	t.mu.Lock()
	p, ok := t.ports[portID]
	if !ok {
		t.mu.Unlock()
		return fmt.Errorf("target: port %d: %w", portID, ErrNotFound)
	}
	if !p.unlink(subsysNQN) {
		t.mu.Unlock()
		return fmt.Errorf("target: port %d: subsystem %s: %w", portID, subsysNQN, ErrNotFound)
	}
	drop := p.controllersOfLocked(t.subsys[subsysNQN])
	t.portChangedLocked(p)
	t.mu.Unlock()
	for _, c := range drop {
		c.shutdown("subsystem unlinked from the port")
	}
	return nil
}

// RemovePort deletes a port: Serve on it returns, and every controller
// connected through it is torn down.
func (t *Target) RemovePort(portID uint16) error {
	t.mu.Lock()
	p, ok := t.ports[portID]
	if !ok {
		t.mu.Unlock()
		return fmt.Errorf("target: port %d: %w", portID, ErrNotFound)
	}
	delete(t.ports, portID)
	t.genctr++
	drop := p.controllersLocked()
	t.mu.Unlock()
	p.close()
	for _, c := range drop {
		c.shutdown("port removed")
	}
	t.log.Info("port removed", "port", portID)
	return nil
}

// Port returns the port portID as it is now, and false when there is
// none. A caller that serves the port later from another goroutine
// should look it up first and call Port.Serve: Serve looks the ID up
// when it runs, which after a quick reload may be a newer port.
func (t *Target) Port(portID uint16) (*Port, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	p, ok := t.ports[portID]
	return p, ok
}

// Serve accepts the queues hosts open on l and serves them as port p,
// as Target.Serve does; once p is removed (or replaced by a reload) it
// returns at once.
func (p *Port) Serve(ctx context.Context, l fabrics.Listener) error { return p.serve(ctx, l) }

// Serve accepts the queues hosts open on l and serves them as port
// portID, until ctx is done, the port is removed or the listener fails.
// It closes l before returning. Queues already accepted keep being served
// until their controller goes away.
func (t *Target) Serve(ctx context.Context, portID uint16, l fabrics.Listener) error {
	t.mu.RLock()
	p, ok := t.ports[portID]
	t.mu.RUnlock()
	if !ok {
		l.Close()
		return fmt.Errorf("target: serve port %d: %w", portID, ErrNotFound)
	}
	return p.serve(ctx, l)
}

// Close tears down every controller, stops every port's Serve and closes
// every namespace's device.
func (t *Target) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.closeHealthPoller()
	var ctrls []*controller
	for _, s := range t.subsys {
		ctrls = append(ctrls, s.controllersLocked()...)
	}
	ctrls = append(ctrls, t.disc.controllersLocked()...)
	ports := make([]*Port, 0, len(t.ports))
	for _, p := range t.ports {
		ports = append(ports, p)
	}
	t.mu.Unlock()
	// Queues first, namespaces after: a command that arrives meanwhile
	// must not find its namespace gone (Invalid Namespace, DNR) but its
	// queue lost, which a multipath host retries on another path.
	for _, p := range ports {
		p.close()
	}
	for _, c := range ctrls {
		c.shutdown("target closed")
	}
	t.mu.Lock()
	var nss []*namespace
	for _, s := range t.subsys {
		nss = append(nss, s.removeAllNamespaces()...)
	}
	t.mu.Unlock()
	var errs []error
	for _, ns := range nss {
		errs = append(errs, ns.destroy())
	}
	return errors.Join(errs...)
}

// subsystemLocked finds an NVM subsystem; t.mu must be held.
// namespaceLocked returns namespace nsid of subsystem nqn, enabled or
// not, and the subsystem (t.mu held).
func (t *Target) namespaceLocked(nqn string, nsid uint32) (*Subsystem, *namespace, error) {
	s, err := t.subsystemLocked(nqn)
	if err != nil {
		return nil, nil, err
	}
	ns := s.table().byID[nsid]
	if ns == nil {
		return nil, nil, fmt.Errorf("target: subsystem %s namespace %d: %w", nqn, nsid, ErrNotFound)
	}
	return s, ns, nil
}

func (t *Target) subsystemLocked(nqn string) (*Subsystem, error) {
	s, ok := t.subsys[nqn]
	if !ok {
		return nil, fmt.Errorf("target: subsystem %s: %w", nqn, ErrNotFound)
	}
	return s, nil
}

// discoveryChangedLocked records a change of what hosts see of s in the
// discovery log: genctr moves and the discovery controllers connected to
// a port that exports s get an event, those of host alone when it is not
// empty (Linux nvmet_subsys_disc_changed).
func (t *Target) discoveryChangedLocked(s *Subsystem, host string) {
	t.genctr++
	for _, c := range t.disc.ctrls {
		if c.port.exports(s.nqn) && (host == "" || c.hostNQN == host) {
			c.discoveryChanged()
		}
	}
}

// portChangedLocked records a change of a port's discovery entries.
func (t *Target) portChangedLocked(p *Port) {
	t.genctr++
	for _, c := range t.disc.ctrls {
		if c.port == p {
			c.discoveryChanged()
		}
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := hostSet(a)
	for _, x := range b {
		if !m[x] {
			return false
		}
	}
	return true
}

func hostSet(h []string) map[string]bool {
	m := make(map[string]bool, len(h))
	for _, x := range h {
		m[x] = true
	}
	return m
}
