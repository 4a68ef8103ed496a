package configfs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/hashicorp/hcl/v2"
)

// The JSON that `nvmetcli save` writes (/etc/nvmet/config.json): nvmetcli
// dumps each configfs directory as an object, with attribute groups ("attr",
// "addr", "param", "device") holding the attribute files' contents as
// strings, and "enable", "nsid" and "portid" as numbers. Field order here is
// alphabetical, as nvmetcli sorts keys.
//
// Our own settings the kernel has no attribute for (backend, size,
// block_size, grow, buffered_io and eui64 of a namespace, with an rbd
// namespace's pool, image, ceph_conf, client_id and keyring; the name,
// provider, device and tos of a port) go in an "nvmeof" object, which
// nvmetcli ignores.
type nvmetcliConfig struct {
	Hosts      []nvmetcliHost      `json:"hosts"`
	Ports      []nvmetcliPort      `json:"ports"`
	Subsystems []nvmetcliSubsystem `json:"subsystems"`
}

type nvmetcliHost struct {
	// Attr holds the DH-HMAC-CHAP attributes under the kernel's file
	// names (configfs/auth.go).
	Attr map[string]jsonString `json:"attr,omitempty"`
	// DHCHAP holds the same under nvmetcli's attribute-group naming
	// (configfs dhchap_key is group "dhchap", key "key"), read too.
	DHCHAP map[string]jsonString `json:"dhchap,omitempty"`
	NQN    string                `json:"nqn"`
}

type nvmetcliPort struct {
	Addr       map[string]jsonString `json:"addr"`
	ANAGroups  []nvmetcliANAGroup    `json:"ana_groups"`
	Nvmeof     *nvmeofPort           `json:"nvmeof,omitempty"`
	Param      map[string]jsonString `json:"param,omitempty"`
	PortID     *jsonInt              `json:"portid"`
	Referrals  []json.RawMessage     `json:"referrals"`
	Subsystems []string              `json:"subsystems"`
}

// nvmetcliANAGroup is ports/<id>/ana_groups/<grpid>: `nvmetcli save`
// writes {"ana": {"state": "optimized"}, "grpid": 1} (group 1 for every
// port, the kernel creates it).
type nvmetcliANAGroup struct {
	ANA   map[string]jsonString `json:"ana"`
	GrpID *jsonInt              `json:"grpid"`
}

type nvmeofPort struct {
	Device   string   `json:"device,omitempty"`
	Name     string   `json:"name,omitempty"`
	Provider string   `json:"provider,omitempty"`
	TOS      *jsonInt `json:"tos,omitempty"`
	// ConnectTimeout is connect_timeout in seconds.
	ConnectTimeout *jsonInt `json:"connect_timeout,omitempty"`
	// MaxPending and MaxPendingPerHost are max_pending and
	// max_pending_per_host.
	MaxPending        *jsonInt `json:"max_pending,omitempty"`
	MaxPendingPerHost *jsonInt `json:"max_pending_per_host,omitempty"`
}

type nvmetcliSubsystem struct {
	AllowedHosts []string              `json:"allowed_hosts"`
	Attr         map[string]jsonString `json:"attr"`
	Namespaces   []nvmetcliNamespace   `json:"namespaces"`
	NQN          string                `json:"nqn"`
	Passthru     []json.RawMessage     `json:"passthru,omitempty"`
}

// nvmetcliNamespace is subsystems/<nqn>/namespaces/<nsid>. nvmetcli
// writes the ANA group twice: as the "ana" attribute group's "grpid" (the
// ana_grpid file) and as "ana_grpid", which `nvmetcli restore` applies
// last, so it wins; 0 is what it saves on kernels without ANA.
type nvmetcliNamespace struct {
	ANA      map[string]jsonString `json:"ana,omitempty"`
	ANAGrpID *jsonInt              `json:"ana_grpid,omitempty"`
	Device   map[string]jsonString `json:"device"`
	Enable   *jsonInt              `json:"enable,omitempty"`
	NSID     *jsonInt              `json:"nsid"`
	Nvmeof   *nvmeofNamespace      `json:"nvmeof,omitempty"`
	Resv     map[string]jsonString `json:"resv,omitempty"`
}

type nvmeofNamespace struct {
	Backend    string `json:"backend,omitempty"`
	BlockSize  uint32 `json:"block_size,omitempty"`
	BufferedIO bool   `json:"buffered_io,omitempty"`
	QueueDepth int    `json:"queue_depth,omitempty"`
	EUI64      string `json:"eui64,omitempty"`
	Grow       bool   `json:"grow,omitempty"`
	Size       int64  `json:"size,omitempty"`
	// Ceph RBD (backend rbd): nvmetcli has no such backend, so these
	// live in our extension object only.
	Pool     string `json:"pool,omitempty"`
	Image    string `json:"image,omitempty"`
	CephConf string `json:"ceph_conf,omitempty"`
	ClientID string `json:"client_id,omitempty"`
	Keyring  string `json:"keyring,omitempty"`
	// ResvPTPLFile is resv_ptpl_file (nvmetd only).
	ResvPTPLFile string `json:"resv_ptpl_file,omitempty"`
}

// jsonString is an attribute value: nvmetcli writes strings, hand-written
// files may hold numbers or booleans (nvmetcli writes str(value) back).
type jsonString string

func (s *jsonString) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) > 0 && b[0] == '"':
		var v string
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		*s = jsonString(v)
	case string(b) == "true":
		*s = "1"
	case string(b) == "false":
		*s = "0"
	case string(b) == "null":
		*s = ""
	default:
		var n json.Number
		if err := json.Unmarshal(b, &n); err != nil {
			return fmt.Errorf("attribute value %s is not a string, number or boolean", b)
		}
		*s = jsonString(n)
	}
	return nil
}

// jsonInt is a number nvmetcli writes as a JSON number (and reads with
// int(), so strings of digits are accepted too).
type jsonInt int64

func (n *jsonInt) UnmarshalJSON(b []byte) error {
	var s jsonString
	if err := s.UnmarshalJSON(b); err != nil {
		return err
	}
	v, err := strconv.ParseInt(string(s), 10, 64)
	if err != nil {
		return fmt.Errorf("%s is not an integer", b)
	}
	*n = jsonInt(v)
	return nil
}

// ParseNvmetcliJSON loads the JSON `nvmetcli save` writes, and validates
// it; filename is used in error positions. Every key it does not apply is
// reported at its JSON path and line:col (checkNvmetcliKeys): unknown keys
// and kernel attributes whose loss hosts would notice (pi_enable,
// datagram queue pairs) are errors, others at values other than the
// kernel's defaults (ieee_oui, max_queue_size) warnings; referrals and
// passthru subsystems are errors. A port's ana_groups and a namespace's
// ana_grpid (or "ana": {"grpid"}) are applied; a group without a state is
// optimized, as the kernel makes it. A namespace
// without "enable" is disabled, as nvmetcli leaves it; a namespace without
// our "nvmeof" backend gets one from its path (see InferBackend). It is
// Loader{}.ParseNvmetcliJSON.
func ParseNvmetcliJSON(data []byte, filename string) (*Tree, error) {
	return Loader{}.ParseNvmetcliJSON(data, filename)
}

// ParseNvmetcliJSON loads nvmetcli's JSON as the package's
// ParseNvmetcliJSON does, with l's checks.
func (l Loader) ParseNvmetcliJSON(data []byte, filename string) (*Tree, error) {
	var cfg nvmetcliConfig
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&cfg); err != nil {
		return nil, Errors{jsonError(data, filename, err)}
	}
	c := l.collector()
	t := &Tree{LogLevel: DefaultLogLevel}
	// Keys the typed decoding dropped: errors, or warnings kept with the
	// tree (Tree.Warnings).
	keyErrs, keyWarns := checkNvmetcliKeys(data, filename)
	c.errs = append(c.errs, keyErrs...)
	t.loadWarns = keyWarns
	for _, h := range cfg.Hosts {
		host := &Host{NQN: h.NQN}
		hostFromJSON(host, h.Attr)
		for k, v := range h.DHCHAP {
			host.setAuth("dhchap_"+k, string(v))
		}
		t.Hosts = append(t.Hosts, host)
	}
	for i, js := range cfg.Subsystems {
		path := "subsystems/" + js.NQN
		if js.NQN == "" {
			c.add(nil, nil, fmt.Sprintf("subsystems[%d]", i), "nqn", "missing")
			continue
		}
		s := NewSubsystem(js.NQN)
		s.AllowedHosts = js.AllowedHosts
		if len(js.Passthru) > 0 {
			c.add(nil, nil, path, "passthru", "passthru subsystems are not supported")
		}
		for k, v := range js.Attr {
			val := string(v)
			switch k {
			case "allow_any_host":
				b, err := parseKernelBool(val)
				if err != nil {
					c.add(nil, nil, path, "attr_allow_any_host", "%v", err)
				}
				s.AllowAnyHost = b
			case "serial":
				s.Serial = val
			case "model":
				s.Model = val
			case "firmware":
				s.Firmware = val
			case "version":
				s.Version = val
			case "cntlid_min", "cntlid_max":
				n, err := strconv.ParseUint(val, 10, 16)
				if err != nil || n == 0 {
					c.add(nil, nil, path, "attr_"+k, "%q is not a number from 1 to %d", val, DefaultCntlidMax)
					continue
				}
				if k == "cntlid_min" {
					s.CntlidMin = uint16(n)
				} else {
					s.CntlidMax = uint16(n)
				}
			case "qid_max":
				n, err := strconv.ParseUint(val, 10, 16)
				if err != nil || n == 0 || n > MaxQIDMax {
					c.add(nil, nil, path, "attr_qid_max", "%q is not a number from 1 to %d", val, MaxQIDMax)
					continue
				}
				s.QIDMax = int(n)
			}
		}
		for j, jn := range js.Namespaces {
			if jn.NSID == nil {
				c.add(nil, nil, fmt.Sprintf("%s/namespaces[%d]", path, j), "nsid", "missing")
				continue
			}
			nspath := fmt.Sprintf("%s/namespaces/%d", path, int64(*jn.NSID))
			if *jn.NSID < 1 || *jn.NSID > MaxNSID {
				c.add(nil, nil, nspath, "", "NSID %d is not from 1 to %d", int64(*jn.NSID), uint32(MaxNSID))
				continue
			}
			ns := &Namespace{NSID: uint32(*jn.NSID), Enable: jn.Enable != nil && *jn.Enable != 0}
			ns.DevicePath = string(jn.Device["path"])
			if v := string(jn.Device["uuid"]); v != "" {
				u, err := ParseUUID(v)
				if err != nil {
					c.add(nil, nil, nspath, "device_uuid", "%v", err)
				}
				ns.DeviceUUID = u
			}
			if v := string(jn.Device["nguid"]); v != "" {
				g, err := ParseNGUID(v)
				if err != nil {
					c.add(nil, nil, nspath, "device_nguid", "%v", err)
				}
				ns.DeviceNGUID = g
			}
			if x := jn.Nvmeof; x != nil {
				ns.Backend, ns.BlockSize, ns.BufferedIO, ns.Grow, ns.Size = x.Backend, x.BlockSize, x.BufferedIO, x.Grow, x.Size
				ns.Pool, ns.Image, ns.CephConf, ns.ClientID, ns.Keyring = x.Pool, x.Image, x.CephConf, x.ClientID, x.Keyring
				ns.ResvPTPLFile = x.ResvPTPLFile
				ns.QueueDepth = x.QueueDepth
				if x.EUI64 != "" {
					e, err := ParseEUI64(x.EUI64)
					if err != nil {
						c.add(nil, nil, nspath, "device_eui64", "%v", err)
					}
					ns.DeviceEUI64 = e
				}
			}
			ns.ANAGrpID = nvmetcliANAGrpID(c, nspath, jn)
			if v, ok := jn.Resv["enable"]; ok {
				b, err := parseKernelBool(string(v))
				if err != nil {
					c.add(nil, nil, nspath, "resv_enable", "%v", err)
				}
				ns.ResvEnable = b
			}
			if ns.Backend == "" && ns.DevicePath != "" {
				ns.Backend = InferBackend(ns.DevicePath)
			}
			s.Namespaces = append(s.Namespaces, ns)
		}
		t.Subsystems = append(t.Subsystems, s)
	}
	for i, jp := range cfg.Ports {
		if jp.PortID == nil {
			c.add(nil, nil, fmt.Sprintf("ports[%d]", i), "portid", "missing")
			continue
		}
		if *jp.PortID < 0 || *jp.PortID > 0xffff {
			c.add(nil, nil, fmt.Sprintf("ports[%d]", i), "portid", "%d is not from 0 to 65535", int64(*jp.PortID))
			continue
		}
		p := NewPort(strconv.FormatInt(int64(*jp.PortID), 10))
		p.PortID = uint16(*jp.PortID)
		if x := jp.Nvmeof; x != nil {
			if x.Name != "" {
				p.ID = x.Name
			}
			if x.Provider != "" {
				p.Provider = x.Provider
			}
			p.Device = x.Device
		}
		path := "ports/" + p.ID
		if x := jp.Nvmeof; x != nil {
			for _, f := range []struct {
				name   string
				v      *jsonInt
				lo, hi int64
				dst    *int
			}{
				{"tos", x.TOS, 0, MaxTOS, &p.TOS},
				{"connect_timeout", x.ConnectTimeout, 1, MaxConnectTimeout, &p.ConnectTimeout},
				{"max_pending", x.MaxPending, 1, MaxPending, &p.MaxPending},
				{"max_pending_per_host", x.MaxPendingPerHost, 1, MaxPending, &p.MaxPendingPerHost},
			} {
				if f.v == nil {
					continue
				}
				if n := int64(*f.v); n < f.lo || n > f.hi {
					c.add(nil, nil, path, f.name, "%d is not from %d to %d", n, f.lo, f.hi)
					continue
				}
				*f.dst = int(*f.v)
			}
		}
		p.Trtype = string(jp.Addr["trtype"])
		p.Adrfam = string(jp.Addr["adrfam"])
		p.Traddr = string(jp.Addr["traddr"])
		p.Trsvcid = string(jp.Addr["trsvcid"])
		if v, ok := jp.Addr["treq"]; ok && v != "" {
			p.Treq = string(v)
		}
		if p.Trtype == TransportRDMA || p.Trtype == TransportTCP {
			if p.Adrfam == "" {
				p.Adrfam = p.DerivedAdrfam()
			}
			if p.Trsvcid == "" {
				p.Trsvcid = DefaultTrsvcid
			}
		}
		if v, ok := jp.Param["inline_data_size"]; ok && v != "" {
			if n, err := strconv.Atoi(string(v)); err != nil {
				c.add(nil, nil, path, "param_inline_data_size", "%q is not a number", string(v))
			} else {
				p.InlineDataSize = max(n, -1) // < 0: the transport chooses
			}
		}
		for j, jg := range jp.ANAGroups {
			gp := fmt.Sprintf("%s/ana_groups[%d]", path, j)
			if jg.GrpID == nil {
				c.add(nil, nil, gp, "grpid", "missing")
				continue
			}
			if *jg.GrpID < 1 || *jg.GrpID > MaxANAGroups {
				c.add(nil, nil, gp, "grpid", "ANA group ID %d is not from 1 to %d", int64(*jg.GrpID), MaxANAGroups)
				continue
			}
			g := ANAGroup{GrpID: uint32(*jg.GrpID), State: ANAOptimized}
			if v := jg.ANA["state"]; v != "" {
				g.State = string(v)
			}
			p.ANAGroups = append(p.ANAGroups, g)
		}
		sortANAGroups(p.ANAGroups)
		if len(jp.Referrals) > 0 {
			c.add(nil, nil, path, "referrals", "referrals are not supported")
		}
		p.Subsystems = jp.Subsystems
		t.Ports = append(t.Ports, p)
	}
	t.validate(c)
	if len(c.errs) > 0 {
		c.errs.inFile(filename)
		return nil, c.errs
	}
	t.file = filename
	t.json = bytes.Clone(data) // for Tree.NamespaceError
	return t, nil
}

// nvmetcliANAGrpID returns a namespace's ANA group: ana_grpid, else the
// "ana" group's grpid, as `nvmetcli restore` applies them; 0 (the
// default group) when neither is there or the value is 0.
func nvmetcliANAGrpID(c *collector, nspath string, jn nvmetcliNamespace) uint32 {
	v, ok := int64(0), false
	if jn.ANAGrpID != nil {
		v, ok = int64(*jn.ANAGrpID), true
	} else if s := string(jn.ANA["grpid"]); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			c.add(nil, nil, nspath, "ana_grpid", "%q is not a number", s)
			return 0
		}
		v, ok = n, true
	}
	if !ok {
		return 0
	}
	if v < 0 || v > MaxANAGroups {
		c.add(nil, nil, nspath, "ana_grpid", "ANA group %d is not from 1 to %d", v, MaxANAGroups)
		return 0
	}
	return uint32(v)
}

// parseKernelBool parses a boolean as kstrtobool does for the common
// spellings.
func parseKernelBool(s string) (bool, error) {
	switch s {
	case "1", "y", "Y", "yes", "on", "true":
		return true, nil
	case "0", "n", "N", "no", "off", "false":
		return false, nil
	}
	return false, fmt.Errorf("%q is not a boolean (0 or 1)", s)
}

// jsonError turns a decoding error into an Error with the line and column
// of its offset.
func jsonError(data []byte, filename string, err error) *Error {
	var off int64 = -1
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		off = max(syn.Offset-1, 0) // Offset counts the offending byte
	case errors.Is(err, io.ErrUnexpectedEOF):
		off = int64(len(data))
	case errors.As(err, &typ):
		off = typ.Offset
	}
	e := &Error{Path: filename, Msg: err.Error()}
	if off >= 0 {
		off = min(off, int64(len(data)))
		line, col := 1, 1
		for _, b := range data[:off] {
			if b == '\n' {
				line++
				col = 1
			} else {
				col++
			}
		}
		e.Path = ""
		e.Range = &hcl.Range{Filename: filename, Start: hcl.Pos{Line: line, Column: col, Byte: int(off)}, End: hcl.Pos{Line: line, Column: col, Byte: int(off)}}
	}
	return e
}

// NvmetcliJSON returns the tree in the JSON format of `nvmetcli save`, which
// `nvmetcli restore` loads into the kernel target (given NQNs and paths it
// accepts). Namespaces carry their effective identifiers (see
// Namespace.IDs), so the kernel target shows the same ones.
func (t *Tree) NvmetcliJSON() ([]byte, error) {
	cfg := nvmetcliConfig{Hosts: []nvmetcliHost{}, Ports: []nvmetcliPort{}, Subsystems: []nvmetcliSubsystem{}}
	for _, h := range t.Hosts {
		cfg.Hosts = append(cfg.Hosts, nvmetcliHost{NQN: h.NQN, Attr: hostJSONAttr(h)})
	}
	portIDs := t.PortIDs()
	for _, p := range t.Ports {
		id := jsonInt(portIDs[p.ID])
		jp := nvmetcliPort{
			Addr: map[string]jsonString{
				"adrfam":  jsonString(p.Adrfam),
				"traddr":  jsonString(p.Traddr),
				"treq":    jsonString(p.Treq),
				"trsvcid": jsonString(p.Trsvcid),
				"trtype":  jsonString(p.Trtype),
			},
			PortID:     &id,
			Referrals:  []json.RawMessage{},
			Subsystems: append([]string{}, p.Subsystems...),
		}
		if jp.Addr["adrfam"] == "" {
			jp.Addr["adrfam"] = jsonString(p.DerivedAdrfam())
		}
		if jp.Addr["treq"] == "" {
			jp.Addr["treq"] = TreqNotSpecified
		}
		jp.ANAGroups = nvmetcliANAGroups(p)
		if p.InlineDataSize >= 0 {
			jp.Param = map[string]jsonString{"inline_data_size": jsonString(strconv.Itoa(p.InlineDataSize))}
		}
		var x nvmeofPort
		if p.ID != strconv.Itoa(int(id)) {
			x.Name = p.ID
		}
		if p.Trtype == TransportRDMA && p.EffectiveProvider() != ProviderAuto {
			x.Provider = p.Provider
		}
		x.Device = p.Device
		if p.TOS >= 0 {
			tos := jsonInt(p.TOS)
			x.TOS = &tos
		}
		if p.ConnectTimeout > 0 {
			ct := jsonInt(p.ConnectTimeout)
			x.ConnectTimeout = &ct
		}
		if p.MaxPending > 0 {
			n := jsonInt(p.MaxPending)
			x.MaxPending = &n
		}
		if p.MaxPendingPerHost > 0 {
			n := jsonInt(p.MaxPendingPerHost)
			x.MaxPendingPerHost = &n
		}
		if x != (nvmeofPort{}) {
			jp.Nvmeof = &x
		}
		cfg.Ports = append(cfg.Ports, jp)
	}
	for _, s := range t.Subsystems {
		lo, hi := s.EffectiveCntlidRange()
		js := nvmetcliSubsystem{
			AllowedHosts: append([]string{}, s.AllowedHosts...),
			Attr: map[string]jsonString{
				"allow_any_host": "0",
				"cntlid_max":     jsonString(strconv.Itoa(int(hi))),
				"cntlid_min":     jsonString(strconv.Itoa(int(lo))),
				"version":        jsonString(s.EffectiveVersion()),
			},
			Namespaces: []nvmetcliNamespace{},
			NQN:        s.NQN,
		}
		if s.QIDMax != 0 {
			js.Attr["qid_max"] = jsonString(strconv.Itoa(s.QIDMax))
		}
		if s.AllowAnyHost {
			js.Attr["allow_any_host"] = "1"
		}
		for k, v := range map[string]string{"serial": s.Serial, "model": s.Model, "firmware": s.Firmware} {
			if v != "" {
				js.Attr[k] = jsonString(v)
			}
		}
		for _, ns := range s.Namespaces {
			u, g, _ := ns.IDs(s.NQN)
			nsid, enable := jsonInt(ns.NSID), jsonInt(0)
			if ns.Enable {
				enable = 1
			}
			jn := nvmetcliNamespace{
				Device: map[string]jsonString{"path": jsonString(ns.DevicePath), "uuid": jsonString(u.String()), "nguid": jsonString(g.String())},
				Enable: &enable,
				NSID:   &nsid,
				Nvmeof: &nvmeofNamespace{Backend: ns.Backend, BlockSize: ns.BlockSize, BufferedIO: ns.BufferedIO, Grow: ns.Grow, Size: ns.Size,
					Pool: ns.Pool, Image: ns.Image, CephConf: ns.CephConf, ClientID: ns.ClientID, Keyring: ns.Keyring,
					ResvPTPLFile: ns.ResvPTPLFile, QueueDepth: ns.QueueDepth},
			}
			if !ns.DeviceEUI64.IsZero() {
				jn.Nvmeof.EUI64 = ns.DeviceEUI64.String()
			}
			if ns.ResvEnable {
				jn.Resv = map[string]jsonString{"enable": "1"}
			}
			grp := jsonInt(ns.EffectiveANAGrpID())
			jn.ANAGrpID = &grp
			jn.ANA = map[string]jsonString{"grpid": jsonString(strconv.FormatInt(int64(grp), 10))}
			js.Namespaces = append(js.Namespaces, jn)
		}
		cfg.Subsystems = append(cfg.Subsystems, js)
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("configfs: nvmetcli JSON: %w", err)
	}
	return append(b, '\n'), nil
}

// nvmetcliANAGroups returns a port's ANA groups as `nvmetcli save` writes
// them: in grpid order, with group 1, which every port has.
func nvmetcliANAGroups(p *Port) []nvmetcliANAGroup {
	gs := p.EffectiveANAGroups()
	out := make([]nvmetcliANAGroup, len(gs))
	for i, g := range gs {
		id := jsonInt(g.GrpID)
		out[i] = nvmetcliANAGroup{ANA: map[string]jsonString{"state": jsonString(g.State)}, GrpID: &id}
	}
	return out
}
