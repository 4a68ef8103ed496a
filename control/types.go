package control

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/target"
)

// The objects of the API: params of add and modify methods (members left
// out keep their value or default) and the results of list methods. The
// member names are those of nvmetd's HCL configuration.

// Port is a port: a transport address and the subsystems it exports.
type Port struct {
	ID                string  `json:"id"`
	PortID            *uint16 `json:"portid,omitempty"`
	Transport         *string `json:"transport,omitempty"`
	Address           *string `json:"address,omitempty"`
	AddressFamily     *string `json:"address_family,omitempty"`
	Service           *string `json:"service,omitempty"`
	Provider          *string `json:"provider,omitempty"`
	Device            *string `json:"device,omitempty"`
	TOS               *int    `json:"tos,omitempty"`
	Treq              *string `json:"treq,omitempty"`
	InlineDataSize    *int    `json:"inline_data_size,omitempty"`
	ConnectTimeout    *int    `json:"connect_timeout,omitempty"`
	MaxPending        *int    `json:"max_pending,omitempty"`
	MaxPendingPerHost *int    `json:"max_pending_per_host,omitempty"`
	DataPoolSize      *Size   `json:"data_pool_size,omitempty"`
	SRQSize           *int    `json:"srq_size,omitempty"`
	// Congestion is the soft port's RoCEv2 congestion control as one
	// string (configfs.ParseCongestionSpec: "on", "off", or the congestion
	// block's keys as KEY=VALUE pairs separated by commas).
	Congestion *string  `json:"congestion,omitempty"`
	Subsystems []string `json:"subsystems,omitempty"`
	// ANAGroups are the port's ANA group states; a modify that gives
	// them replaces them all (port.ana_state sets one).
	ANAGroups []ANAGroup `json:"ana_groups,omitempty"`
}

// ANAGroup is a port's state of one ANA group.
type ANAGroup struct {
	GrpID uint32 `json:"grpid"`
	// State is optimized, non-optimized, inaccessible, persistent-loss
	// or change.
	State string `json:"state"`
}

// ANAStateParams are port.ana_state's: port ID's state of group GrpID.
type ANAStateParams struct {
	ID    string `json:"id"`
	GrpID uint32 `json:"grpid"`
	State string `json:"state"`
}

// Subsystem is an NVM subsystem.
type Subsystem struct {
	NQN            string   `json:"nqn"`
	AllowAnyHost   *bool    `json:"allow_any_host,omitempty"`
	AllowedHosts   []string `json:"allowed_hosts,omitempty"`
	Serial         *string  `json:"serial,omitempty"`
	Model          *string  `json:"model,omitempty"`
	Firmware       *string  `json:"firmware,omitempty"`
	Version        *string  `json:"version,omitempty"`
	CntlidMin      *uint16  `json:"cntlid_min,omitempty"`
	CntlidMax      *uint16  `json:"cntlid_max,omitempty"`
	QIDMax         *int     `json:"qid_max,omitempty"`
	MaxControllers *int     `json:"max_controllers,omitempty"`
	// MaxControllersPerHost bounds one host NQN's controllers.
	MaxControllersPerHost *int        `json:"max_controllers_per_host,omitempty"`
	Ports                 []string    `json:"ports,omitempty"`
	Namespaces            []Namespace `json:"namespaces,omitempty"` // results only
}

// Namespace is a namespace of subsystem NQN.
type Namespace struct {
	NQN        string  `json:"nqn,omitempty"`
	NSID       uint32  `json:"nsid,omitempty"`
	Backend    *string `json:"backend,omitempty"`
	Path       *string `json:"path,omitempty"`
	Size       *Size   `json:"size,omitempty"`
	BlockSize  *uint32 `json:"block_size,omitempty"`
	Grow       *bool   `json:"grow,omitempty"`
	UUID       *string `json:"uuid,omitempty"`
	NGUID      *string `json:"nguid,omitempty"`
	EUI64      *string `json:"eui64,omitempty"`
	Enabled    *bool   `json:"enabled,omitempty"`
	BufferedIO *bool   `json:"buffered_io,omitempty"`
	// QueueDepth bounds the I/Os in flight to a file or block backend.
	QueueDepth *int `json:"queue_depth,omitempty"`
	// ANAGrpID is the namespace's ANA group.
	ANAGrpID *uint32 `json:"ana_grpid,omitempty"`
	// Ceph RBD (backend rbd): the image, its pool, the cluster's
	// configuration file, the client ID and keyring.
	Pool     *string `json:"pool,omitempty"`
	Image    *string `json:"image,omitempty"`
	CephConf *string `json:"ceph_conf,omitempty"`
	ClientID *string `json:"client_id,omitempty"`
	Keyring  *string `json:"keyring,omitempty"`
}

// Host is a host NQN subsystems may allow, with its DH-HMAC-CHAP
// settings. Keys are write-only: lists say whether one is set.
type Host struct {
	NQN           string   `json:"nqn"`
	DHCHAPKey     *string  `json:"dhchap_key,omitempty"`
	DHCHAPCtrlKey *string  `json:"dhchap_ctrl_key,omitempty"`
	DHCHAPHash    *string  `json:"dhchap_hash,omitempty"`
	DHCHAPDHGroup *string  `json:"dhchap_dhgroup,omitempty"`
	HasKey        bool     `json:"has_dhchap_key,omitempty"`      // results only
	HasCtrlKey    bool     `json:"has_dhchap_ctrl_key,omitempty"` // results only
	AllowedIn     []string `json:"allowed_in,omitempty"`          // results only
}

// Controller is a connected controller (ctrl.list).
type Controller struct {
	Subsystem     string  `json:"subsystem"`
	Discovery     bool    `json:"discovery,omitempty"`
	CntlID        uint16  `json:"cntlid"`
	HostNQN       string  `json:"hostnqn"`
	HostID        string  `json:"hostid"`
	Port          string  `json:"port"`
	PortID        uint16  `json:"portid"`
	Transport     string  `json:"trtype"`
	Remote        string  `json:"remote"` // the host's address; "" when it has none (loop)
	KATOMs        int64   `json:"kato_ms"`
	AuthRequired  bool    `json:"auth_required"`
	Authenticated bool    `json:"authenticated"`
	Ready         bool    `json:"ready"`
	ConnectedFor  float64 `json:"connected_seconds"`
	Queues        []Queue `json:"queues"`
}

// Queue is a queue of a controller.
type Queue struct {
	QID           uint16 `json:"qid"`
	Depth         int    `json:"depth"`
	Authenticated bool   `json:"authenticated,omitempty"`
}

// Size is a byte count: a JSON number, or a string with a unit as the
// configuration writes it ("64MiB", "1G").
type Size int64

// UnmarshalJSON accepts a number or a size string.
func (s *Size) UnmarshalJSON(b []byte) error {
	var n int64
	if err := json.Unmarshal(b, &n); err == nil {
		*s = Size(n)
		return nil
	}
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		return fmt.Errorf("size: want a number of bytes or a string such as \"64MiB\"")
	}
	n, err := configfs.ParseSize(str)
	if err != nil {
		return fmt.Errorf("size %q: %w", str, err)
	}
	*s = Size(n)
	return nil
}

func ptr[T any](v T) *T { return &v }

// ptrIf returns &v when ok, else nil (the member is left out).
func ptrIf[T any](v T, ok bool) *T {
	if !ok {
		return nil
	}
	return &v
}

// nonEmpty returns &v, or nil for "" (the member is left out).
func nonEmpty(v string) *string { return ptrIf(v, v != "") }

// portInfo describes p of tree t (portid: its effective number).
func portInfo(p *configfs.Port, portid uint16) Port {
	out := Port{ID: p.ID, PortID: ptr(portid), Transport: ptr(p.Trtype), Service: ptr(p.Trsvcid),
		Treq: ptr(p.Treq), InlineDataSize: ptr(p.EffectiveInlineDataSize()), Subsystems: p.Subsystems}
	if out.Subsystems == nil {
		out.Subsystems = []string{}
	}
	if p.Traddr != "" {
		out.Address = ptr(p.Traddr)
		if fam := p.Adrfam; fam != "" {
			out.AddressFamily = ptr(fam)
		} else if fam := p.DerivedAdrfam(); fam != "" {
			out.AddressFamily = ptr(fam)
		}
	}
	if p.Trtype == configfs.TransportRDMA {
		out.Provider = ptr(p.EffectiveProvider())
	}
	out.Device = nonEmpty(p.Device)
	out.TOS = ptrIf(p.TOS, p.TOS >= 0)
	out.ConnectTimeout = ptrIf(p.ConnectTimeout, p.ConnectTimeout > 0)
	out.MaxPending = ptrIf(p.MaxPending, p.MaxPending > 0)
	out.MaxPendingPerHost = ptrIf(p.MaxPendingPerHost, p.MaxPendingPerHost > 0)
	out.DataPoolSize = ptrIf(Size(p.DataPoolSize), p.DataPoolSize > 0)
	out.SRQSize = ptrIf(p.SRQSize, p.SRQSize >= 0)
	if p.Congestion != nil {
		out.Congestion = ptr(p.Congestion.Spec())
	}
	out.ANAGroups = anaGroups(p)
	return out
}

// anaGroups lists p's ANA group states, group 1 always.
func anaGroups(p *configfs.Port) []ANAGroup {
	var out []ANAGroup
	for _, g := range p.EffectiveANAGroups() {
		out = append(out, ANAGroup{GrpID: g.GrpID, State: g.State})
	}
	return out
}

// setANAState sets p's state of group grpid, keeping the groups in order.
func setANAState(p *configfs.Port, grpid uint32, state string) {
	i, found := slices.BinarySearchFunc(p.ANAGroups, grpid, func(g configfs.ANAGroup, id uint32) int { return cmp.Compare(g.GrpID, id) })
	if found {
		p.ANAGroups[i].State = state
		return
	}
	p.ANAGroups = slices.Insert(p.ANAGroups, i, configfs.ANAGroup{GrpID: grpid, State: state})
}

// setPort applies the members given in q to p.
func setPort(p *configfs.Port, q *Port) error {
	if q.Congestion != nil {
		c, err := configfs.ParseCongestionSpec(*q.Congestion)
		if err != nil {
			return invalidParams("congestion: %v", err)
		}
		p.Congestion = c
		if !c.Enabled && c.Spec() == "off" {
			p.Congestion = nil // "off": no block
		}
	}
	set(&p.Trtype, q.Transport)
	set(&p.Traddr, q.Address)
	set(&p.Adrfam, q.AddressFamily)
	set(&p.Trsvcid, q.Service)
	set(&p.Provider, q.Provider)
	set(&p.Device, q.Device)
	set(&p.TOS, q.TOS)
	set(&p.Treq, q.Treq)
	set(&p.InlineDataSize, q.InlineDataSize)
	set(&p.ConnectTimeout, q.ConnectTimeout)
	set(&p.MaxPending, q.MaxPending)
	set(&p.MaxPendingPerHost, q.MaxPendingPerHost)
	set(&p.SRQSize, q.SRQSize)
	set(&p.PortID, q.PortID)
	if q.DataPoolSize != nil {
		p.DataPoolSize = int64(*q.DataPoolSize)
	}
	if q.Address != nil && q.AddressFamily == nil {
		p.Adrfam = p.DerivedAdrfam()
	}
	if q.ANAGroups != nil {
		p.ANAGroups = nil
		for _, g := range q.ANAGroups {
			setANAState(p, g.GrpID, g.State)
		}
	}
	return nil
}

func set[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

func subsystemInfo(t *configfs.Tree, s *configfs.Subsystem) Subsystem {
	// Results give the values in effect: what the target uses when the
	// configuration leaves an attribute out (0 or ""), as Identify
	// Controller and Connect admission see them.
	out := Subsystem{NQN: s.NQN, AllowAnyHost: ptr(s.AllowAnyHost), AllowedHosts: s.AllowedHosts,
		Version: ptr(s.EffectiveVersion()), QIDMax: ptr(cmp.Or(s.QIDMax, target.DefaultMaxIOQueues)),
		MaxControllers:        ptr(cmp.Or(s.MaxControllers, target.DefaultMaxControllers)),
		MaxControllersPerHost: ptr(cmp.Or(s.MaxControllersPerHost, target.DefaultMaxControllersPerHost))}
	lo, hi := s.EffectiveCntlidRange()
	out.CntlidMin, out.CntlidMax = ptr(lo), ptr(hi)
	out.Serial = ptr(cmp.Or(s.Serial, target.DerivedSerial(s.NQN)))
	out.Model = ptr(cmp.Or(s.Model, target.DefaultModel))
	out.Firmware = ptr(cmp.Or(s.Firmware, target.DefaultFirmwareRevision))
	for _, p := range t.PortsOf(s.NQN) {
		out.Ports = append(out.Ports, p.ID)
	}
	if out.AllowedHosts == nil {
		out.AllowedHosts = []string{}
	}
	if out.Ports == nil {
		out.Ports = []string{}
	}
	out.Namespaces = []Namespace{}
	for _, ns := range s.Namespaces {
		out.Namespaces = append(out.Namespaces, namespaceInfo(s.NQN, ns))
	}
	return out
}

func setSubsystem(s *configfs.Subsystem, q *Subsystem) {
	set(&s.AllowAnyHost, q.AllowAnyHost)
	set(&s.Serial, q.Serial)
	set(&s.Model, q.Model)
	set(&s.Firmware, q.Firmware)
	set(&s.Version, q.Version)
	set(&s.CntlidMin, q.CntlidMin)
	set(&s.CntlidMax, q.CntlidMax)
	set(&s.QIDMax, q.QIDMax)
	set(&s.MaxControllers, q.MaxControllers)
	set(&s.MaxControllersPerHost, q.MaxControllersPerHost)
	if q.AllowedHosts != nil {
		s.AllowedHosts = append([]string(nil), q.AllowedHosts...)
	}
}

func namespaceInfo(nqn string, ns *configfs.Namespace) Namespace {
	uuid, nguid, eui := ns.IDs(nqn)
	out := Namespace{NQN: nqn, NSID: ns.NSID, Backend: ptr(ns.Backend), Size: ptr(Size(ns.Size)),
		BlockSize: ptr(ns.BlockSize), Grow: ptr(ns.Grow), UUID: ptr(uuid.String()), NGUID: ptr(nguid.String()),
		EUI64: ptr(eui.String()), Enabled: ptr(ns.Enable), BufferedIO: ptr(ns.BufferedIO), ANAGrpID: ptr(ns.EffectiveANAGrpID())}
	if ns.Backend == configfs.BackendFile || ns.Backend == configfs.BackendBlock {
		out.QueueDepth = ptr(ns.EffectiveQueueDepth())
	}
	out.Path = nonEmpty(ns.DevicePath)
	out.Pool, out.Image, out.CephConf = nonEmpty(ns.Pool), nonEmpty(ns.Image), nonEmpty(ns.CephConf)
	out.ClientID, out.Keyring = nonEmpty(ns.ClientID), nonEmpty(ns.Keyring)
	return out
}

// setNamespace applies the members given in q to ns.
func setNamespace(ns *configfs.Namespace, q *Namespace) *Error {
	set(&ns.Backend, q.Backend)
	set(&ns.DevicePath, q.Path)
	if q.Size != nil {
		ns.Size = int64(*q.Size)
	}
	set(&ns.BlockSize, q.BlockSize)
	set(&ns.Grow, q.Grow)
	set(&ns.Enable, q.Enabled)
	set(&ns.BufferedIO, q.BufferedIO)
	set(&ns.QueueDepth, q.QueueDepth)
	set(&ns.ANAGrpID, q.ANAGrpID)
	set(&ns.Pool, q.Pool)
	set(&ns.Image, q.Image)
	set(&ns.CephConf, q.CephConf)
	set(&ns.ClientID, q.ClientID)
	set(&ns.Keyring, q.Keyring)
	if err := parseID(q.UUID, "uuid", configfs.ParseUUID, &ns.DeviceUUID); err != nil {
		return err
	}
	if err := parseID(q.NGUID, "nguid", configfs.ParseNGUID, &ns.DeviceNGUID); err != nil {
		return err
	}
	return parseID(q.EUI64, "eui64", configfs.ParseEUI64, &ns.DeviceEUI64)
}

// parseID sets *dst to the identifier v (when given) names.
func parseID[T any](v *string, name string, parse func(string) (T, error), dst *T) *Error {
	if v == nil {
		return nil
	}
	id, err := parse(*v)
	if err != nil {
		return invalidParams("%s: %v", name, err)
	}
	*dst = id
	return nil
}

func hostInfo(t *configfs.Tree, h *configfs.Host) Host {
	out := Host{NQN: h.NQN, HasKey: h.DHCHAPKey != "", HasCtrlKey: h.DHCHAPCtrlKey != "", AllowedIn: []string{}}
	if h.HasDHCHAP() {
		out.DHCHAPHash = ptr(h.EffectiveDHCHAPHash())
		out.DHCHAPDHGroup = ptr(h.EffectiveDHCHAPDHGroup())
	}
	for _, s := range t.Subsystems {
		for _, a := range s.AllowedHosts {
			if a == h.NQN {
				out.AllowedIn = append(out.AllowedIn, s.NQN)
			}
		}
	}
	return out
}

func setHost(h *configfs.Host, q *Host) {
	if q.DHCHAPKey != nil {
		h.DHCHAPKey, h.DHCHAPKeyFile = configfs.Secret(*q.DHCHAPKey), ""
	}
	if q.DHCHAPCtrlKey != nil {
		h.DHCHAPCtrlKey, h.DHCHAPCtrlKeyFile = configfs.Secret(*q.DHCHAPCtrlKey), ""
	}
	set(&h.DHCHAPHash, q.DHCHAPHash)
	set(&h.DHCHAPDHGroup, q.DHCHAPDHGroup)
}

func controllerInfo(c controllerSnapshot) Controller {
	out := Controller{Subsystem: c.Subsystem, Discovery: c.Discovery, CntlID: c.CntlID, HostNQN: c.HostNQN,
		HostID: configfs.UUID(c.HostID).String(), Port: c.Port, PortID: c.PortID, Transport: c.Remote.Transport,
		KATOMs: c.KATO.Milliseconds(), AuthRequired: c.AuthRequired, Authenticated: c.Authenticated,
		Ready: c.Ready, ConnectedFor: time.Since(c.Created).Round(time.Second).Seconds(), Queues: []Queue{}}
	if c.Remote.Addr.IsValid() {
		out.Remote = c.Remote.Addr.String()
	}
	for _, q := range c.Queues {
		out.Queues = append(out.Queues, Queue{QID: q.QID, Depth: q.Depth, Authenticated: q.Authenticated})
	}
	return out
}
