package nvmeprint

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/initiator/session"
	"github.com/nvmeof/nvmeof/nvme"
)

// Printers of list-subsys, get-log, error-log, ns-descs and get-feature,
// in nvme-cli 2.x's shapes (nvme-print-stdout.c, nvme-print-json.c).

// hexDump prints b as nvme-cli's d(buf, len, 16, 1): a column header,
// then per 16 bytes the offset, the bytes and their printable ASCII.
func hexDump(w io.Writer, b []byte) error {
	const width = 16
	var s strings.Builder
	s.WriteString("     ")
	for i := range width {
		fmt.Fprintf(&s, "%3x", i)
	}
	var ascii []byte
	i := 0
	for ; i < len(b); i++ {
		if i%width == 0 {
			fmt.Fprintf(&s, "\n%04x:", i)
		}
		fmt.Fprintf(&s, " %02x", b[i])
		c := b[i]
		if c < '!' || c > '~' {
			c = '.'
		}
		ascii = append(ascii, c)
		if (i+1)%width == 0 {
			fmt.Fprintf(&s, " \"%s\"", ascii)
			ascii = ascii[:0]
		}
	}
	if len(ascii) > 0 {
		rest := width - i%width
		fmt.Fprintf(&s, " %*s \"%s\"", 3*rest, "", ascii)
	}
	s.WriteString("\n")
	_, err := io.WriteString(w, s.String())
	return err
}

// hexLines returns b as nvme-cli's d_json does for JSON output: one
// string of hex bytes per 16 bytes.
func hexLines(b []byte) []string {
	out := []string{}
	for off := 0; off < len(b); off += 16 {
		end := min(off+16, len(b))
		var s strings.Builder
		for i, c := range b[off:end] {
			if i > 0 {
				s.WriteByte(' ')
			}
			fmt.Fprintf(&s, "%02x", c)
		}
		out = append(out, s.String())
	}
	return out
}

// GetLog prints a log page as `nvme get-log`: a header line and a
// hex dump (JSON: the same facts and the dump's lines; nvme-cli has no
// JSON form for a raw log page).
func GetLog(w io.Writer, format, devname string, lid uint8, nsid uint32, data []byte) error {
	if format == JSON {
		return WriteJSON(w, Obj{{"device", devname}, {"log-id", lid}, {"namespace-id", nsid},
			{"log-len", len(data)}, {"data", hexLines(data)}})
	}
	if _, err := fmt.Fprintf(w, "Device:%s log-id:%d namespace-id:%#x\n", devname, lid, nsid); err != nil {
		return err
	}
	return hexDump(w, data)
}

// trtypeErrStr is libnvme's nvme_trtype_to_string for the Error
// Information log's TRTYPE.
func trtypeErrStr(t uint8) string {
	switch t {
	case 0:
		return "The transport type is not indicated or the error is not transport related"
	case 1:
		return "RDMA Transport error"
	case 2:
		return "Fibre Channel Transport error"
	case 3:
		return "TCP Transport error"
	case 254:
		return "Intra-host Transport error"
	}
	return "Reserved"
}

// ErrorLog prints Error Information log entries as `nvme error-log`.
func ErrorLog(w io.Writer, format, devname string, es []nvme.ErrorLogEntry) error {
	if format == JSON {
		errs := make([]Obj, 0, len(es))
		for _, e := range es {
			errs = append(errs, Obj{
				{"error_count", e.ErrorCount()},
				{"sqid", e.SQID()},
				{"cmdid", e.CID()},
				{"status_field", e.StatusRaw() >> 1},
				{"phase_tag", e.StatusRaw() & 1},
				{"parm_error_location", e.ParameterErrorLocation()},
				{"lba", e.LBA()},
				{"nsid", e.NSID()},
				{"vs", e.VendorSpecificInfo()},
				{"trtype", e.TRTYPE()},
				{"cs", e.CommandSpecificInfo()},
				{"trtype_spec_info", e.TransportSpecificInfo()},
			})
		}
		return WriteJSON(w, Obj{{"errors", errs}})
	}
	var s strings.Builder
	fmt.Fprintf(&s, "Error Log Entries for device:%s entries:%d\n", devname, len(es))
	s.WriteString(".................\n")
	for i, e := range es {
		st := e.StatusRaw() >> 1
		fmt.Fprintf(&s, " Entry[%2d]   \n", i)
		s.WriteString(".................\n")
		fmt.Fprintf(&s, "error_count\t: %d\n", e.ErrorCount())
		fmt.Fprintf(&s, "sqid\t\t: %d\n", e.SQID())
		fmt.Fprintf(&s, "cmdid\t\t: %s\n", hx(uint64(e.CID())))
		fmt.Fprintf(&s, "status_field\t: %s (%s)\n", hx(uint64(st)), nvme.Status(st&0x7ff).Name())
		fmt.Fprintf(&s, "phase_tag\t: %s\n", hx(uint64(e.StatusRaw()&1)))
		fmt.Fprintf(&s, "parm_err_loc\t: %s\n", hx(uint64(e.ParameterErrorLocation())))
		fmt.Fprintf(&s, "lba\t\t: %s\n", hx(e.LBA()))
		fmt.Fprintf(&s, "nsid\t\t: %s\n", hx(uint64(e.NSID())))
		fmt.Fprintf(&s, "vs\t\t: %d\n", e.VendorSpecificInfo())
		fmt.Fprintf(&s, "trtype\t\t: %d (%s)\n", e.TRTYPE(), trtypeErrStr(e.TRTYPE()))
		fmt.Fprintf(&s, "cs\t\t: %s\n", hx(e.CommandSpecificInfo()))
		fmt.Fprintf(&s, "trtype_spec_info: %s\n", hx(uint64(e.TransportSpecificInfo())))
		s.WriteString(".................\n")
	}
	_, err := io.WriteString(w, s.String())
	return err
}

// nsDescValue formats a descriptor's identifier as nvme-cli does: hex for
// EUI-64 and NGUID, the UUID form, "%#x" for the CSI; "" for a type
// nvme-cli skips.
func nsDescValue(d nvme.NSDescriptor) (name, value string) {
	switch d.NIDT {
	case nvme.NIDTEUI64:
		return "eui64", fmt.Sprintf("%x", d.NID)
	case nvme.NIDTNGUID:
		return "nguid", fmt.Sprintf("%x", d.NID)
	case nvme.NIDTUUID:
		var u [16]byte
		copy(u[:], d.NID)
		return "uuid", fabrics.FormatUUID(u)
	case nvme.NIDTCSI:
		return "csi", hx(uint64(d.NID[0]))
	}
	return "", ""
}

// NSDescs prints the Namespace Identification Descriptor list of a
// namespace as `nvme ns-descs` (JSON "loc" is each descriptor's offset in
// the list).
func NSDescs(w io.Writer, format string, nsid uint32, ds []nvme.NSDescriptor) error {
	if format == JSON {
		var arr []Obj
		loc := 0
		for _, d := range ds {
			name, v := nsDescValue(d)
			if name != "" {
				arr = append(arr, Obj{{"loc", loc}, {"nidt", d.NIDT}, {"nidl", len(d.NID)}, {"Type", name}, {name, v}})
			}
			loc += 4 + len(d.NID)
		}
		root := Obj{}
		if arr != nil {
			root = append(root, KV{"ns-descs", arr})
		}
		return WriteJSON(w, root)
	}
	var s strings.Builder
	fmt.Fprintf(&s, "NVME Namespace Identification Descriptors NS %d:\n", nsid)
	for _, d := range ds {
		name, v := nsDescValue(d)
		if name != "" {
			fmt.Fprintf(&s, "%-8s: %s\n", name, v)
		}
	}
	_, err := io.WriteString(w, s.String())
	return err
}

// featureName is libnvme's nvme_feature_to_string.
func featureName(fid nvme.FeatureID) string {
	switch fid {
	case nvme.FeatAsyncEventConfig:
		return "Async Event Configuration"
	}
	if n := fid.String(); !strings.HasPrefix(n, "Feature 0x") && !strings.HasPrefix(n, "Vendor Specific") {
		return n
	}
	return "Unknown"
}

// selectName is nvme_select_to_string.
func selectName(sel uint8) string {
	switch nvme.FeatureSelect(sel) {
	case nvme.SelectCurrent:
		return "Current"
	case nvme.SelectDefault:
		return "Default"
	case nvme.SelectSaved:
		return "Saved"
	case nvme.SelectSupportedCapabilities:
		return "Supported capabilities"
	}
	return "Reserved"
}

// FeatureResult is one Get Features answer.
type FeatureResult struct {
	FID    nvme.FeatureID
	Sel    uint8
	Result uint32
	Data   []byte // the feature's data structure, for the features with one
}

// hexWidth formats v as C's "%#0*x" with width w.
func hexWidth(v uint32, w int) string {
	s := hx(uint64(v))
	for len(s) < w {
		if v == 0 {
			s = "0" + s
		} else {
			s = "0x0" + s[2:]
		}
	}
	return s
}

// featureWidths are the widths (hexWidth) nvme-cli prints get-feature's
// feature ID and value with: narrower for 0, which %#x prints without 0x.
func featureWidths(f FeatureResult) (fid, value int) {
	fid, value = 2, 8
	if f.FID != 0 {
		fid = 4
	}
	if f.Result != 0 {
		value = 10
	}
	return fid, value
}

// featureHeader is get-feature's first line.
func featureHeader(f FeatureResult) string {
	fw, rw := featureWidths(f)
	return fmt.Sprintf("get-feature:%s (%s), %s value:%s", hexWidth(uint32(f.FID), fw), featureName(f.FID),
		selectName(f.Sel), hexWidth(f.Result, rw))
}

// featureField is one decoded field of a feature value (-H).
type featureField struct {
	Label string // as nvme-cli's stdout, padded
	Key   string // nvme-cli's JSON key
	Value any    // the JSON value
	Text  string // the stdout text
}

func yes(b bool, t, f string) string {
	if b {
		return t
	}
	return f
}

// thselName and tmpselName are nvme_feature_temp_type_to_string and
// nvme_feature_temp_sel_to_string.
func thselName(v uint32) string {
	switch v {
	case 0:
		return "Over Temperature Threshold"
	case 1:
		return "Under Temperature Threshold"
	}
	return "Reserved"
}

func tmpselName(v uint32) string {
	switch {
	case v == 0:
		return "Composite Temperature"
	case v >= 1 && v <= 8:
		return fmt.Sprintf("Temperature Sensor %d", v)
	case v == 0xf:
		return "All Temperature Sensors"
	}
	return "Reserved"
}

// workloadHint is nvme_feature_wl_hints_to_string.
func workloadHint(v uint32) string {
	switch v {
	case 0:
		return "No Workload"
	case 1:
		return "Extended Idle Period with a Burst of Random Write"
	case 2:
		return "Heavy Sequential Writes"
	}
	return "Reserved"
}

// featureFields decodes the features nvmeof knows (those our target and
// the Linux target answer); nil for the others.
func featureFields(fid nvme.FeatureID, r uint32) []featureField {
	u := func(label, key string, v uint32) featureField {
		return featureField{label, key, v, fmt.Sprint(v)}
	}
	str := func(label, key, v string) featureField { return featureField{label, key, v, v} }
	switch fid {
	case nvme.FeatArbitration:
		ab := "No limit"
		if r&7 != 7 {
			ab = fmt.Sprint(uint32(1) << (r & 7))
		}
		return []featureField{
			u("High Priority Weight   (HPW)", "High Priority Weight (HPW)", r>>24+1),
			u("Medium Priority Weight (MPW)", "Medium Priority Weight (MPW)", r>>16&0xff+1),
			u("Low Priority Weight    (LPW)", "Low Priority Weight (LPW)", r>>8&0xff+1),
			str("Arbitration Burst       (AB)", "Arbitration Burst (AB)", ab),
		}
	case nvme.FeatPowerManagement:
		wh := r >> 5 & 7
		return []featureField{
			{"Workload Hint (WH)", "Workload Hint (WH)", wh, fmt.Sprintf("%d - %s", wh, workloadHint(wh))},
			u("Power State   (PS)", "Power State (PS)", r&0x1f),
		}
	case nvme.FeatTemperatureThreshold:
		th, ts, k := r>>20&3, r>>16&0xf, r&0xffff
		return []featureField{
			{"Threshold Type Select         (THSEL)", "Threshold Type Select (THSEL)", th, fmt.Sprintf("%d - %s", th, thselName(th))},
			{"Threshold Temperature Select (TMPSEL)", "Threshold Temperature Select (TMPSEL)", ts, fmt.Sprintf("%d - %s", ts, tmpselName(ts))},
			str("Temperature Threshold         (TMPTH)", "Temperature Threshold (TMPTH)", fmt.Sprintf("%d Celsius", int(k)-273)),
			str("TMPTH kelvin", "TMPTH kelvin", fmt.Sprintf("%d K", k)),
		}
	case nvme.FeatErrorRecovery:
		return []featureField{
			str("Deallocated or Unwritten Logical Block Error Enable (DULBE)", "Deallocated or Unwritten Logical Block Error Enable (DULBE)", yes(r>>16&1 != 0, "Enabled", "Disabled")),
			str("Time Limited Error Recovery                          (TLER)", "Time Limited Error Recovery (TLER)", fmt.Sprintf("%d ms", (r&0xffff)*100)),
		}
	case nvme.FeatVolatileWriteCache:
		return []featureField{str("Volatile Write Cache Enable (WCE)", "Volatile Write Cache Enable (WCE)", yes(r&1 != 0, "Enabled", "Disabled"))}
	case nvme.FeatNumberOfQueues:
		return []featureField{
			u("Number of IO Completion Queues Allocated (NCQA)", "Number of IO Completion Queues Allocated (NCQA)", r>>16+1),
			u("Number of IO Submission Queues Allocated (NSQA)", "Number of IO Submission Queues Allocated (NSQA)", r&0xffff+1),
		}
	case nvme.FeatWriteAtomicityNormal:
		return []featureField{str("Disable Normal (DN)", "Disable Normal (DN)", yes(r&1 != 0, "True", "False"))}
	case nvme.FeatAsyncEventConfig:
		send := func(b bool) string { return yes(b, "Send async event", "Do not send async event") }
		const w = 56
		pad := func(s string) string { return fmt.Sprintf("%-*s", w, s) }
		return []featureField{
			str(pad("Discovery Log Page Change Notices"), "Discovery Log Page Change Notices", send(r>>31&1 != 0)),
			str(pad("Endurance Group Event Aggregate Log Change Notices"), "Endurance Group Event Aggregate Log Change Notices", send(r>>14&1 != 0)),
			str(pad("LBA Status Information Notices"), "LBA Status Information Notices", send(r>>13&1 != 0)),
			str(pad("Predictable Latency Event Aggregate Log Change Notices"), "Predictable Latency Event Aggregate Log Change Notices", send(r>>12&1 != 0)),
			str(pad("Asymmetric Namespace Access Change Notices"), "Asymmetric Namespace Access Change Notices", send(r>>11&1 != 0)),
			str(pad("Telemetry Log Notices"), "Telemetry Log Notices", send(r>>10&1 != 0)),
			str(pad("Firmware Activation Notices"), "Firmware Activation Notices", send(r>>9&1 != 0)),
			str(pad("Namespace Attribute Notices"), "Namespace Attribute Notices", send(r>>8&1 != 0)),
			str(pad("SMART / Health Critical Warnings"), "SMART / Health Critical Warnings", send(r&0xff != 0)),
		}
	case nvme.FeatKeepAliveTimer:
		return []featureField{u("Keep Alive Timeout (KATO) in milliseconds", "Keep Alive Timeout (KATO) in milliseconds", r)}
	}
	return nil
}

// selectCaps lists the capabilities of a SEL 3 answer.
func selectCaps(r uint32) []string {
	return bitNames(r, []bitName{
		{nvme.FeatureCapSaveable, "saveable"},
		{nvme.FeatureCapNamespaceSpecific, "per-namespace"},
		{nvme.FeatureCapChangeable, "changeable"},
	})
}

// bitName names one bit of a flags field.
type bitName struct {
	bit  uint32
	name string
}

// bitNames lists, in the order of names, the names of the bits set in v
// (nil when none is).
func bitNames(v uint32, names []bitName) []string {
	var out []string
	for _, b := range names {
		if v&b.bit != 0 {
			out = append(out, b.name)
		}
	}
	return out
}

// Feature prints one Get Features answer as `nvme get-feature`:
// the header line, then the capabilities (SEL 3), the decoded fields
// (-H) or a hex dump of the feature's data. JSON is nvme-cli's
// {"feature", "name", "sel", "value"} object, followed by one with the
// capabilities or the decoded fields.
func Feature(w io.Writer, format string, f FeatureResult, human bool) error {
	fw, rw := featureWidths(f)
	if format == JSON {
		if err := WriteJSON(w, Obj{{"feature", hexWidth(uint32(f.FID), fw)}, {"name", featureName(f.FID)},
			{"sel", selectName(f.Sel)}, {"value", hexWidth(f.Result, rw)}}); err != nil {
			return err
		}
		switch {
		case nvme.FeatureSelect(f.Sel) == nvme.SelectSupportedCapabilities:
			caps := selectCaps(f.Result)
			if caps == nil {
				caps = []string{}
			}
			return WriteJSON(w, Obj{{fmt.Sprintf("Feature: %s: select", hexWidth(uint32(f.FID), fw)), caps}})
		case human:
			if fs := featureFields(f.FID, f.Result); fs != nil {
				o := Obj{}
				for _, fl := range fs {
					o = append(o, KV{fl.Key, fl.Value})
				}
				return WriteJSON(w, o)
			}
		}
		return nil
	}
	var fs []featureField
	if human {
		fs = featureFields(f.FID, f.Result)
	}
	var s strings.Builder
	s.WriteString(featureHeader(f) + "\n")
	switch {
	case nvme.FeatureSelect(f.Sel) == nvme.SelectSupportedCapabilities:
		caps := selectCaps(f.Result)
		for _, c := range caps {
			fmt.Fprintf(&s, "\tFeature is %s\n", c)
		}
		if len(caps) == 0 {
			s.WriteString("\tFeature has no capabilities\n")
		}
	case fs != nil:
		for _, fl := range fs {
			fmt.Fprintf(&s, "\t%s: %s\n", fl.Label, fl.Text)
		}
	case len(f.Data) > 0:
		if _, err := io.WriteString(w, s.String()); err != nil {
			return err
		}
		return hexDump(w, f.Data)
	}
	_, err := io.WriteString(w, s.String())
	return err
}

// subsysGroup is one subsystem of list-subsys under one host NQN.
type subsysGroup struct {
	name  string
	nqn   string
	paths []*session.State
}

// hostGroup is one host NQN of list-subsys.
type hostGroup struct {
	hostnqn, hostid string
	subsys          []*subsysGroup
}

// groupSubsystems groups connections by host NQN, then subsystem NQN, as
// libnvme's tree. Subsystems are numbered nvmeof-subsysN in the order of
// their first controller (the kernel numbers nvme-subsysN as they appear).
func groupSubsystems(states []*session.State) []*hostGroup {
	sorted := append([]*session.State(nil), states...)
	sort.SliceStable(sorted, func(i, j int) bool { return ctrlIndex(sorted[i].Name) < ctrlIndex(sorted[j].Name) })
	index := map[string]int{}
	for _, st := range sorted {
		if _, ok := index[st.SubsysNQN]; !ok {
			index[st.SubsysNQN] = len(index)
		}
	}
	var hosts []*hostGroup
	byHost := map[string]*hostGroup{}
	for _, st := range sorted {
		h := byHost[st.HostNQN]
		if h == nil {
			h = &hostGroup{hostnqn: st.HostNQN, hostid: st.HostID}
			byHost[st.HostNQN] = h
			hosts = append(hosts, h)
		}
		var g *subsysGroup
		for _, s := range h.subsys {
			if s.nqn == st.SubsysNQN {
				g = s
			}
		}
		if g == nil {
			g = &subsysGroup{name: fmt.Sprintf("%s-subsys%d", session.NamePrefix, index[st.SubsysNQN]), nqn: st.SubsysNQN}
			h.subsys = append(h.subsys, g)
		}
		g.paths = append(g.paths, st)
	}
	return hosts
}

// ctrlIndex returns N of nvmeofN for ordering (-1 for other names).
func ctrlIndex(name string) int {
	var n int
	if _, err := fmt.Sscanf(name, session.NamePrefix+"%d", &n); err != nil {
		return -1
	}
	return n
}

// iopolicy is what list-subsys reports as the I/O policy of a subsystem
// whose daemons do not report one (no multipath).
const iopolicy = "none"

// subsysPolicy returns the subsystem's multipath I/O policy.
func subsysPolicy(s *subsysGroup) string {
	for _, p := range s.paths {
		if p.IOPolicy != "" {
			return p.IOPolicy
		}
	}
	return iopolicy
}

// listPath is one line of list-subsys: a controller (path).
type listPath struct {
	name, transport, address, state, ana string
}

// pathsOf returns the paths of a daemon's state: each controller of its
// multipath, with its ANA state (of namespace nsid, or of the first
// namespace when nsid is 0), or the daemon's one controller.
func pathsOf(st *session.State, nsid uint32) []listPath {
	if len(st.Paths) == 0 {
		return []listPath{{st.Name, st.Transport, st.Address(), st.State, ""}}
	}
	var nsPaths []session.NamespacePath
	for _, ns := range st.Namespaces {
		if ns.NSID == nsid {
			nsPaths = ns.Paths
		}
	}
	out := make([]listPath, 0, len(st.Paths))
	for _, p := range st.Paths {
		ana := p.ANAState
		for _, np := range nsPaths {
			if np.Path == p.Name {
				ana = np.ANAState
			}
		}
		out = append(out, listPath{p.Name, p.Transport, p.Address(), p.State, ana})
	}
	return out
}

// ListSubsys prints the connected subsystems and their controllers
// (paths) as `nvme list-subsys`, with each path's ANA state.
func ListSubsys(w io.Writer, format string, states []*session.State) error {
	return ListSubsysNS(w, format, states, 0)
}

// ListSubsysNS is ListSubsys with the ANA states of namespace
// nsid (0: each daemon's first namespace).
func ListSubsysNS(w io.Writer, format string, states []*session.State, nsid uint32) error {
	hosts := groupSubsystems(states)
	if format == JSON {
		arr := []Obj{}
		for _, h := range hosts {
			ho := Obj{{"HostNQN", h.hostnqn}}
			if h.hostid != "" {
				ho = append(ho, KV{"HostID", h.hostid})
			}
			subs := []Obj{}
			for _, s := range h.subsys {
				paths := []Obj{}
				for _, st := range s.paths {
					for _, p := range pathsOf(st, nsid) {
						o := Obj{{"Name", p.name}, {"Transport", p.transport}, {"Address", p.address}, {"State", p.state}}
						if p.ana != "" {
							o = append(o, KV{"ANAState", p.ana})
						}
						paths = append(paths, o)
					}
				}
				subs = append(subs, Obj{{"Name", s.name}, {"NQN", s.nqn}, {"IOPolicy", subsysPolicy(s)}, {"Paths", paths}})
			}
			ho = append(ho, KV{"Subsystems", subs})
			arr = append(arr, ho)
		}
		return WriteJSON(w, arr)
	}
	var b strings.Builder
	first := true
	for _, h := range hosts {
		for _, s := range h.subsys {
			if !first {
				b.WriteString("\n")
			}
			first = false
			pad := strings.Repeat(" ", len(s.name))
			fmt.Fprintf(&b, "%s - NQN=%s\n", s.name, s.nqn)
			fmt.Fprintf(&b, "%s   hostnqn=%s\n", pad, h.hostnqn)
			fmt.Fprintf(&b, "%s   iopolicy=%s\n", pad, subsysPolicy(s))
			b.WriteString("\\\n")
			for _, st := range s.paths {
				for _, p := range pathsOf(st, nsid) {
					line := fmt.Sprintf(" +- %s %s %s %s %s", p.name, p.transport, p.address, p.state, p.ana)
					b.WriteString(strings.TrimRight(line, " ") + "\n")
				}
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
