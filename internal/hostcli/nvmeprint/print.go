// Package nvmeprint prints what the nvmeof commands read from a
// controller (discovery log, Identify, log pages, features, reservation
// status) and the connections they hold (list, list-subsys) as nvme-cli
// 2.x does, in its normal and JSON output formats: nvme-print-stdout.c,
// nvme-print-json.c and libnvme's fabrics.c string tables give the field
// names, number bases and JSON keys, so that scripts written for nvme-cli
// read ours.
package nvmeprint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"strings"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/initiator/session"
	"github.com/nvmeof/nvmeof/nvme"
)

// Output formats (-o).
const (
	Normal = "normal"
	JSON   = "json"
)

// hx formats v as C's "%#x" does: "0" for zero, "0x1f" otherwise.
func hx(v uint64) string {
	if v == 0 {
		return "0"
	}
	return "0x" + strconv.FormatUint(v, 16)
}

// KV is one member of an ordered JSON object.
type KV struct {
	K string
	V any
}

// Obj is a JSON object that keeps its members in order (nvme-cli's).
type Obj []KV

// MarshalJSON implements json.Marshaler.
func (o Obj) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, kv := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(kv.K)
		b.Write(k)
		b.WriteByte(':')
		v, err := json.Marshal(kv.V)
		if err != nil {
			return nil, err
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// u128 is a 128-bit counter as a JSON number.
func u128(u nvme.Uint128) json.Number { return json.Number(u.String()) }

// WriteJSON prints v indented, as nvme-cli's json_print does, plus a
// newline.
func WriteJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// ---- discovery log (nvme discover) ----

// libnvme's string tables (fabrics.c); "unrecognized" for other values.
func trtypeStr(t fabrics.TRType) string {
	switch t {
	case fabrics.TRTypeRDMA:
		return "rdma"
	case fabrics.TRTypeFC:
		return "fc"
	case fabrics.TRTypeTCP:
		return "tcp"
	case fabrics.TRTypeLoop:
		return "loop"
	}
	return "unrecognized"
}

func adrfamStr(a fabrics.AdrFam) string {
	switch a {
	case 0:
		return "pci"
	case fabrics.AdrFamIPv4:
		return "ipv4"
	case fabrics.AdrFamIPv6:
		return "ipv6"
	case fabrics.AdrFamIB:
		return "infiniband"
	case fabrics.AdrFamFC:
		return "fibre-channel"
	case fabrics.AdrFamLoop:
		return "loop"
	}
	return "unrecognized"
}

func subtypeStr(s fabrics.SubType) string {
	switch s {
	case fabrics.SubTypeReferral:
		return "discovery subsystem referral"
	case fabrics.SubTypeNVM:
		return "nvme subsystem"
	case fabrics.SubTypeCurrentDiscovery:
		return "current discovery subsystem"
	}
	return "unrecognized"
}

// treqStr names TREQ as libnvme does for the values it knows ("not
// specified", "required", "not required", "not specified, sq flow control
// disable supported"), and composes the secure channel part with the SQ
// flow control bit for the combinations libnvme calls "unrecognized".
func treqStr(t uint8) string {
	var s string
	switch t & fabrics.TREQSecureMask {
	case fabrics.TREQNotSpecified:
		s = "not specified"
	case fabrics.TREQRequired:
		s = "required"
	case fabrics.TREQNotRequired:
		s = "not required"
	default:
		return "unrecognized"
	}
	if t&^(fabrics.TREQSecureMask|fabrics.TREQDisableSQFlow) != 0 {
		return "unrecognized"
	}
	if t&fabrics.TREQDisableSQFlow != 0 {
		s += ", sq flow control disable supported"
	}
	return s
}

func eflagsStr(e uint16) string {
	if e == 0 {
		return "none"
	}
	if e&^(fabrics.EFlagsEPCSD|fabrics.EFlagsDupRetInfo|fabrics.EFlagsNCC) != 0 {
		return "unrecognized"
	}
	return strings.Join(bitNames(uint32(e), []bitName{
		{fabrics.EFlagsEPCSD, "explicit discovery connections"},
		{fabrics.EFlagsDupRetInfo, "duplicate discovery information"},
		{fabrics.EFlagsNCC, "no cdc connectivity"},
	}), ", ")
}

func prtypeStr(p uint8) string {
	switch p {
	case fabrics.RDMAPRTypeNone:
		return "not specified"
	case fabrics.RDMAPRTypeIB:
		return "infiniband"
	case fabrics.RDMAPRTypeRoCE:
		return "roce"
	case fabrics.RDMAPRTypeRoCEv2:
		return "roce-v2"
	case fabrics.RDMAPRTypeIWARP:
		return "iwarp"
	}
	return "unrecognized"
}

func qptypeStr(q uint8) string {
	switch q {
	case fabrics.RDMAQPTypeRC:
		return "connected"
	case fabrics.RDMAQPTypeRD:
		return "datagram"
	}
	return "unrecognized"
}

func cmsStr(c uint8) string {
	if c == fabrics.RDMACMSRDMACM {
		return "rdma-cm"
	}
	return "unrecognized"
}

func sectypeStr(s uint8) string {
	switch s {
	case fabrics.TCPSecTypeNone:
		return "none"
	case fabrics.TCPSecTypeTLS12:
		return "tls"
	case fabrics.TCPSecTypeTLS13:
		return "tls13"
	}
	return "unrecognized"
}

// RDMA TSAS layout (Linux struct nvmf_disc_rsp_page_entry, tsas.rdma):
// qptype, prtype, cms, 5 reserved bytes, pkey (little-endian).
func rdmaTSAS(t [fabrics.TSASLen]byte) (qptype, prtype, cms uint8, pkey uint16) {
	return t[0], t[1], t[2], uint16(t[8]) | uint16(t[9])<<8
}

// Discovery prints a discovery log as `nvme discover` does.
func Discovery(w io.Writer, format string, genctr uint64, entries []initiator.DiscoveryEntry) error {
	if format == JSON {
		recs := make([]Obj, 0, len(entries))
		for _, e := range entries {
			o := Obj{
				{"trtype", trtypeStr(e.TRType)},
				{"adrfam", adrfamStr(e.AdrFam)},
				{"subtype", subtypeStr(e.SubType)},
				{"treq", treqStr(e.TREQ)},
				{"portid", e.PortID},
				{"trsvcid", e.TRSVCID},
				{"subnqn", e.SubNQN},
				{"traddr", e.TRADDR},
				{"eflags", eflagsStr(e.EFlags)},
			}
			switch e.TRType {
			case fabrics.TRTypeRDMA:
				q, p, c, k := rdmaTSAS(e.TSAS)
				o = append(o, KV{"rdma_prtype", prtypeStr(p)}, KV{"rdma_qptype", qptypeStr(q)},
					KV{"rdma_cms", cmsStr(c)}, KV{"rdma_pkey", k})
			case fabrics.TRTypeTCP:
				o = append(o, KV{"sectype", sectypeStr(e.TSAS[0])})
			}
			recs = append(recs, o)
		}
		return WriteJSON(w, Obj{{"genctr", genctr}, {"records", recs}})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nDiscovery Log Number of Records %d, Generation counter %d\n", len(entries), genctr)
	for i, e := range entries {
		adrfam := ""
		if e.TRADDR != "" {
			adrfam = adrfamStr(e.AdrFam)
		}
		fmt.Fprintf(&b, "=====Discovery Log Entry %d======\n", i)
		fmt.Fprintf(&b, "trtype:  %s\n", trtypeStr(e.TRType))
		fmt.Fprintf(&b, "adrfam:  %s\n", adrfam)
		fmt.Fprintf(&b, "subtype: %s\n", subtypeStr(e.SubType))
		fmt.Fprintf(&b, "treq:    %s\n", treqStr(e.TREQ))
		fmt.Fprintf(&b, "portid:  %d\n", e.PortID)
		fmt.Fprintf(&b, "trsvcid: %s\n", e.TRSVCID)
		fmt.Fprintf(&b, "subnqn:  %s\n", e.SubNQN)
		fmt.Fprintf(&b, "traddr:  %s\n", e.TRADDR)
		fmt.Fprintf(&b, "eflags:  %s\n", eflagsStr(e.EFlags))
		switch e.TRType {
		case fabrics.TRTypeRDMA:
			q, p, c, k := rdmaTSAS(e.TSAS)
			fmt.Fprintf(&b, "rdma_prtype: %s\n", prtypeStr(p))
			fmt.Fprintf(&b, "rdma_qptype: %s\n", qptypeStr(q))
			fmt.Fprintf(&b, "rdma_cms:    %s\n", cmsStr(c))
			fmt.Fprintf(&b, "rdma_pkey: 0x%04x\n", k)
		case fabrics.TRTypeTCP:
			fmt.Fprintf(&b, "sectype: %s\n", sectypeStr(e.TSAS[0]))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ---- Identify Controller (nvme id-ctrl) ----

// uuidStr formats 16 bytes as nvme-cli's util_uuid_to_string.
func uuidStr(u [16]byte) string { return fabrics.FormatUUID(u) }

// psPower formats a power value and scale as nvme-cli's
// print_ps_power_and_scale: scale 1 is 0.0001 W, 2 is 0.01 W, 0 is not
// reported ("-").
func psPower(power uint16, scale uint8) string {
	switch scale & 3 {
	case 1:
		return fmt.Sprintf("%d.%04dW", power/10000, power%10000)
	case 2:
		return fmt.Sprintf("%d.%02dW", power/100, power%100)
	}
	return "-"
}

// IDCtrl prints Identify Controller data as `nvme id-ctrl`.
func IDCtrl(w io.Writer, format string, c nvme.IdentifyController) error {
	sn, mn, fr, subnqn := c.SN(), c.MN(), c.FR(), c.SUBNQN()
	if format == JSON {
		o := Obj{
			{"vid", c.VID()}, {"ssvid", c.SSVID()}, {"sn", sn}, {"mn", mn}, {"fr", fr},
			{"rab", c.RAB()}, {"ieee", c.IEEE()}, {"cmic", c.CMIC()}, {"mdts", c.MDTS()},
			{"cntlid", c.CNTLID()}, {"ver", c.VER()}, {"rtd3r", c.RTD3R()}, {"rtd3e", c.RTD3E()},
			{"oaes", c.OAES()}, {"ctratt", c.CTRATT()}, {"rrls", c.RRLS()}, {"cntrltype", c.CNTRLTYPE()},
			{"fguid", uuidStr(c.FGUID())}, {"crdt1", c.CRDT1()}, {"crdt2", c.CRDT2()}, {"crdt3", c.CRDT3()},
			{"nvmsr", c.NVMSR()}, {"vwci", c.VWCI()}, {"mec", c.MEC()},
			{"oacs", c.OACS()}, {"acl", c.ACL()}, {"aerl", c.AERL()}, {"frmw", c.FRMW()},
			{"lpa", c.LPA()}, {"elpe", c.ELPE()}, {"npss", c.NPSS()}, {"avscc", c.AVSCC()},
			{"apsta", c.APSTA()}, {"wctemp", c.WCTEMP()}, {"cctemp", c.CCTEMP()}, {"mtfa", c.MTFA()},
			{"hmpre", c.HMPRE()}, {"hmmin", c.HMMIN()}, {"tnvmcap", u128(c.TNVMCAP())},
			{"unvmcap", u128(c.UNVMCAP())}, {"rpmbs", c.RPMBS()}, {"edstt", c.EDSTT()},
			{"dsto", c.DSTO()}, {"fwug", c.FWUG()}, {"kas", c.KAS()}, {"hctma", c.HCTMA()},
			{"mntmt", c.MNTMT()}, {"mxtmt", c.MXTMT()}, {"sanicap", c.SANICAP()},
			{"hmminds", c.HMMINDS()}, {"hmmaxd", c.HMMAXD()}, {"nsetidmax", c.NSETIDMAX()},
			{"endgidmax", c.ENDGIDMAX()}, {"anatt", c.ANATT()}, {"anacap", c.ANACAP()},
			{"anagrpmax", c.ANAGRPMAX()}, {"nanagrpid", c.NANAGRPID()}, {"pels", c.PELS()},
			{"domainid", c.DOMAINID()}, {"megcap", u128(c.MEGCAP())}, {"sqes", c.SQES()},
			{"cqes", c.CQES()}, {"maxcmd", c.MAXCMD()}, {"nn", c.NN()}, {"oncs", c.ONCS()},
			{"fuses", c.FUSES()}, {"fna", c.FNA()}, {"vwc", c.VWC()}, {"awun", c.AWUN()},
			{"awupf", c.AWUPF()}, {"icsvscc", c.NVSCC()}, {"nwpc", c.NWPC()}, {"acwu", c.ACWU()},
			{"ocfs", c.OCFS()}, {"sgls", c.SGLS()}, {"mnan", c.MNAN()}, {"maxdna", u128(c.MAXDNA())},
			{"maxcna", c.MAXCNA()},
		}
		if subnqn != "" {
			o = append(o, KV{"subnqn", subnqn})
		}
		o = append(o, Obj{
			{"ioccsz", c.IOCCSZ()}, {"iorcsz", c.IORCSZ()}, {"icdoff", c.ICDOFF()},
			{"fcatt", c.FCATT()}, {"msdbd", c.MSDBD()}, {"ofcs", c.OFCS()},
		}...)
		var psds []Obj
		for i := 0; i <= int(c.NPSS()); i++ {
			p := c.PowerState(i)
			if p == nil {
				break
			}
			psds = append(psds, Obj{
				{"max_power", p.MP()}, {"max_power_scale", p.Flags() & 1},
				{"non-operational_state", (p.Flags() & 2) >> 1},
				{"entry_lat", p.ENLAT()}, {"exit_lat", p.EXLAT()},
				{"read_tput", p.RRT()}, {"read_lat", p.RRL()},
				{"write_tput", p.RWT()}, {"write_lat", p.RWL()},
				{"idle_power", p.IDLP()}, {"idle_scale", p.IPS()},
				{"active_power", p.ACTP()}, {"active_power_work", p.APW()}, {"active_scale", p.APS()},
			})
		}
		o = append(o, KV{"psds", psds})
		return WriteJSON(w, o)
	}
	var b strings.Builder
	kv := func(k, v string) { fmt.Fprintf(&b, "%-10s: %s\n", k, v) }
	d := func(v uint64) string { return strconv.FormatUint(v, 10) }
	b.WriteString("NVME Identify Controller:\n")
	kv("vid", hx(uint64(c.VID())))
	kv("ssvid", hx(uint64(c.SSVID())))
	kv("sn", sn)
	kv("mn", mn)
	kv("fr", fr)
	kv("rab", d(uint64(c.RAB())))
	kv("ieee", fmt.Sprintf("%06x", c.IEEE()))
	kv("cmic", hx(uint64(c.CMIC())))
	kv("mdts", d(uint64(c.MDTS())))
	kv("cntlid", hx(uint64(c.CNTLID())))
	kv("ver", hx(uint64(c.VER())))
	kv("rtd3r", hx(uint64(c.RTD3R())))
	kv("rtd3e", hx(uint64(c.RTD3E())))
	kv("oaes", hx(uint64(c.OAES())))
	kv("ctratt", hx(uint64(c.CTRATT())))
	kv("rrls", hx(uint64(c.RRLS())))
	kv("cntrltype", d(uint64(c.CNTRLTYPE())))
	kv("fguid", uuidStr(c.FGUID()))
	kv("crdt1", d(uint64(c.CRDT1())))
	kv("crdt2", d(uint64(c.CRDT2())))
	kv("crdt3", d(uint64(c.CRDT3())))
	kv("nvmsr", d(uint64(c.NVMSR())))
	kv("vwci", d(uint64(c.VWCI())))
	kv("mec", d(uint64(c.MEC())))
	kv("oacs", hx(uint64(c.OACS())))
	kv("acl", d(uint64(c.ACL())))
	kv("aerl", d(uint64(c.AERL())))
	kv("frmw", hx(uint64(c.FRMW())))
	kv("lpa", hx(uint64(c.LPA())))
	kv("elpe", d(uint64(c.ELPE())))
	kv("npss", d(uint64(c.NPSS())))
	kv("avscc", hx(uint64(c.AVSCC())))
	kv("apsta", hx(uint64(c.APSTA())))
	kv("wctemp", d(uint64(c.WCTEMP())))
	kv("cctemp", d(uint64(c.CCTEMP())))
	kv("mtfa", d(uint64(c.MTFA())))
	kv("hmpre", d(uint64(c.HMPRE())))
	kv("hmmin", d(uint64(c.HMMIN())))
	kv("tnvmcap", c.TNVMCAP().String())
	kv("unvmcap", c.UNVMCAP().String())
	kv("rpmbs", hx(uint64(c.RPMBS())))
	kv("edstt", d(uint64(c.EDSTT())))
	kv("dsto", d(uint64(c.DSTO())))
	kv("fwug", d(uint64(c.FWUG())))
	kv("kas", d(uint64(c.KAS())))
	kv("hctma", hx(uint64(c.HCTMA())))
	kv("mntmt", d(uint64(c.MNTMT())))
	kv("mxtmt", d(uint64(c.MXTMT())))
	kv("sanicap", hx(uint64(c.SANICAP())))
	kv("hmminds", d(uint64(c.HMMINDS())))
	kv("hmmaxd", d(uint64(c.HMMAXD())))
	kv("nsetidmax", d(uint64(c.NSETIDMAX())))
	kv("endgidmax", d(uint64(c.ENDGIDMAX())))
	kv("anatt", d(uint64(c.ANATT())))
	kv("anacap", d(uint64(c.ANACAP())))
	kv("anagrpmax", d(uint64(c.ANAGRPMAX())))
	kv("nanagrpid", d(uint64(c.NANAGRPID())))
	kv("pels", d(uint64(c.PELS())))
	kv("domainid", d(uint64(c.DOMAINID())))
	kv("megcap", c.MEGCAP().String())
	kv("sqes", hx(uint64(c.SQES())))
	kv("cqes", hx(uint64(c.CQES())))
	kv("maxcmd", d(uint64(c.MAXCMD())))
	kv("nn", d(uint64(c.NN())))
	kv("oncs", hx(uint64(c.ONCS())))
	kv("fuses", hx(uint64(c.FUSES())))
	kv("fna", hx(uint64(c.FNA())))
	kv("vwc", hx(uint64(c.VWC())))
	kv("awun", d(uint64(c.AWUN())))
	kv("awupf", d(uint64(c.AWUPF())))
	kv("icsvscc", d(uint64(c.NVSCC())))
	kv("nwpc", d(uint64(c.NWPC())))
	kv("acwu", d(uint64(c.ACWU())))
	kv("ocfs", hx(uint64(c.OCFS())))
	kv("sgls", hx(uint64(c.SGLS())))
	kv("mnan", d(uint64(c.MNAN())))
	kv("maxdna", c.MAXDNA().String())
	kv("maxcna", d(uint64(c.MAXCNA())))
	kv("subnqn", subnqn)
	kv("ioccsz", d(uint64(c.IOCCSZ())))
	kv("iorcsz", d(uint64(c.IORCSZ())))
	kv("icdoff", d(uint64(c.ICDOFF())))
	kv("fcatt", hx(uint64(c.FCATT())))
	kv("msdbd", d(uint64(c.MSDBD())))
	kv("ofcs", d(uint64(c.OFCS())))
	for i := 0; i <= int(c.NPSS()); i++ {
		p := c.PowerState(i)
		if p == nil {
			break
		}
		mpScale := uint8(2)
		if p.Flags()&1 != 0 {
			mpScale = 1
		}
		op := "operational"
		if p.Flags()&2 != 0 {
			op = "non-operational"
		}
		fmt.Fprintf(&b, "ps %4d : mp:%s %s enlat:%d exlat:%d rrt:%d rrl:%d\n", i,
			psPower(p.MP(), mpScale), op, p.ENLAT(), p.EXLAT(), p.RRT(), p.RRL())
		fmt.Fprintf(&b, "          rwt:%d rwl:%d idle_power:%s active_power:%s\n",
			p.RWT(), p.RWL(), psPower(p.IDLP(), p.IPS()), psPower(p.ACTP(), p.APS()))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ---- Identify Namespace (nvme id-ns) ----

func hexBytes(b []byte) string {
	var s strings.Builder
	for _, c := range b {
		fmt.Fprintf(&s, "%02x", c)
	}
	return s.String()
}

// IDNS prints Identify Namespace data as `nvme id-ns`.
func IDNS(w io.Writer, format string, nsid uint32, n nvme.IdentifyNamespace) error {
	nguid, eui := n.NGUID(), n.EUI64()
	inUse := n.FormatIndex()
	if format == JSON {
		o := Obj{
			{"nsze", n.NSZE()}, {"ncap", n.NCAP()}, {"nuse", n.NUSE()}, {"nsfeat", n.NSFEAT()},
			{"nlbaf", n.NLBAF()}, {"flbas", n.FLBAS()}, {"mc", n.MC()}, {"dpc", n.DPC()},
			{"dps", n.DPS()}, {"nmic", n.NMIC()}, {"rescap", n.RESCAP()}, {"fpi", n.FPI()},
			{"dlfeat", n.DLFEAT()}, {"nawun", n.NAWUN()}, {"nawupf", n.NAWUPF()},
			{"nacwu", n.NACWU()}, {"nabsn", n.NABSN()}, {"nabo", n.NABO()},
			{"nabspf", n.NABSPF()}, {"noiob", n.NOIOB()}, {"nvmcap", u128(n.NVMCAP())},
			{"nsattr", n.NSATTR()}, {"nvmsetid", n.NVMSETID()},
		}
		if n.NSFEAT()&0x10 != 0 {
			o = append(o, Obj{{"npwg", n.NPWG()}, {"npwa", n.NPWA()}, {"npdg", n.NPDG()},
				{"npda", n.NPDA()}, {"nows", n.NOWS()}}...)
		}
		o = append(o, Obj{
			{"mssrl", n.MSSRL()}, {"mcl", n.MCL()}, {"msrc", n.MSRC()}, {"nulbaf", n.NULBAF()},
			{"anagrpid", n.ANAGRPID()}, {"endgid", n.ENDGID()},
			{"eui64", hexBytes(eui[:])}, {"nguid", hexBytes(nguid[:])},
		}...)
		var lbafs []Obj
		for i := 0; i <= int(n.NLBAF()) && i < 64; i++ {
			f := n.LBAF(i)
			lbafs = append(lbafs, Obj{{"ms", f.MS}, {"ds", f.LBADS}, {"rp", f.RP}})
		}
		o = append(o, KV{"lbafs", lbafs})
		return WriteJSON(w, o)
	}
	var b strings.Builder
	kv := func(k, v string) { fmt.Fprintf(&b, "%-8s: %s\n", k, v) }
	d := func(v uint64) string { return strconv.FormatUint(v, 10) }
	fmt.Fprintf(&b, "NVME Identify Namespace %d:\n", nsid)
	kv("nsze", hx(n.NSZE()))
	kv("ncap", hx(n.NCAP()))
	kv("nuse", hx(n.NUSE()))
	kv("nsfeat", hx(uint64(n.NSFEAT())))
	kv("nlbaf", d(uint64(n.NLBAF())))
	kv("flbas", hx(uint64(n.FLBAS())))
	kv("mc", hx(uint64(n.MC())))
	kv("dpc", hx(uint64(n.DPC())))
	kv("dps", hx(uint64(n.DPS())))
	kv("nmic", hx(uint64(n.NMIC())))
	kv("rescap", hx(uint64(n.RESCAP())))
	kv("fpi", hx(uint64(n.FPI())))
	kv("dlfeat", d(uint64(n.DLFEAT())))
	kv("nawun", d(uint64(n.NAWUN())))
	kv("nawupf", d(uint64(n.NAWUPF())))
	kv("nacwu", d(uint64(n.NACWU())))
	kv("nabsn", d(uint64(n.NABSN())))
	kv("nabo", d(uint64(n.NABO())))
	kv("nabspf", d(uint64(n.NABSPF())))
	kv("noiob", d(uint64(n.NOIOB())))
	kv("nvmcap", n.NVMCAP().String())
	if n.NSFEAT()&0x10 != 0 {
		kv("npwg", d(uint64(n.NPWG())))
		kv("npwa", d(uint64(n.NPWA())))
		kv("npdg", d(uint64(n.NPDG())))
		kv("npda", d(uint64(n.NPDA())))
		kv("nows", d(uint64(n.NOWS())))
	}
	kv("mssrl", d(uint64(n.MSSRL())))
	kv("mcl", d(uint64(n.MCL())))
	kv("msrc", d(uint64(n.MSRC())))
	kv("nulbaf", d(uint64(n.NULBAF())))
	kv("anagrpid", d(uint64(n.ANAGRPID())))
	kv("nsattr", d(uint64(n.NSATTR())))
	kv("nvmsetid", d(uint64(n.NVMSETID())))
	kv("endgid", d(uint64(n.ENDGID())))
	kv("nguid", hexBytes(nguid[:]))
	kv("eui64", hexBytes(eui[:]))
	for i := 0; i <= int(n.NLBAF()) && i < 64; i++ {
		f := n.LBAF(i)
		line := fmt.Sprintf("lbaf %2d : ms:%-3d lbads:%-2d rp:%s", i, f.MS, f.LBADS, hx(uint64(f.RP)))
		if i == inUse {
			line += " (in use)"
		}
		b.WriteString(line + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ---- SMART / Health log (nvme smart-log) ----

// siBytes formats a byte count with an SI suffix, as nvme-cli's
// uint128_t_to_si_string.
func siBytes(v *big.Float) string {
	suffixes := []struct {
		mag float64
		s   string
	}{{1e24, "Y"}, {1e21, "Z"}, {1e18, "E"}, {1e15, "P"}, {1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}}
	for _, s := range suffixes {
		if v.Cmp(big.NewFloat(s.mag)) >= 0 {
			q := new(big.Float).Quo(v, big.NewFloat(s.mag))
			f, _ := q.Float64()
			return fmt.Sprintf("%.2f %sB", f, s.s)
		}
	}
	f, _ := v.Float64()
	return fmt.Sprintf("%.2f B", f)
}

// dataUnits formats a Data Units counter (thousands of 512-byte units).
func dataUnits(u nvme.Uint128) string {
	bytes := new(big.Float).SetInt(new(big.Int).Mul(u.Big(), big.NewInt(512000)))
	return fmt.Sprintf("%s (%s)", u.String(), siBytes(bytes))
}

// celsius formats a temperature in kelvins as nvme-cli's
// nvme_degrees_string plus the kelvins.
func celsius(k uint16) string { return fmt.Sprintf("%d °C (%d K)", int(k)-273, k) }

// SMART prints a SMART / Health log page as `nvme smart-log`.
func SMART(w io.Writer, format, devname string, nsid uint32, l nvme.SMARTLog) error {
	if format == JSON {
		o := Obj{
			{"critical_warning", l.CriticalWarning()},
			{"temperature", l.CompositeTemperature()},
			{"avail_spare", l.AvailableSpare()},
			{"spare_thresh", l.AvailableSpareThreshold()},
			{"percent_used", l.PercentageUsed()},
			{"endurance_grp_critical_warning_summary", l.EnduranceGroupCriticalWarning()},
			{"data_units_read", u128(l.DataUnitsRead())},
			{"data_units_written", u128(l.DataUnitsWritten())},
			{"host_read_commands", u128(l.HostReadCommands())},
			{"host_write_commands", u128(l.HostWriteCommands())},
			{"controller_busy_time", u128(l.ControllerBusyTime())},
			{"power_cycles", u128(l.PowerCycles())},
			{"power_on_hours", u128(l.PowerOnHours())},
			{"unsafe_shutdowns", u128(l.UnsafeShutdowns())},
			{"media_errors", u128(l.MediaErrors())},
			{"num_err_log_entries", u128(l.ErrorLogEntries())},
			{"warning_temp_time", l.WarningTemperatureTime()},
			{"critical_comp_time", l.CriticalTemperatureTime()},
		}
		for i := range 8 {
			if t := l.TemperatureSensor(i); t != 0 {
				o = append(o, KV{fmt.Sprintf("temperature_sensor_%d", i+1), t})
			}
		}
		o = append(o, Obj{
			{"thm_temp1_trans_count", l.ThermalMgmtT1TransitionCount()},
			{"thm_temp2_trans_count", l.ThermalMgmtT2TransitionCount()},
			{"thm_temp1_total_time", l.ThermalMgmtT1TotalTime()},
			{"thm_temp2_total_time", l.ThermalMgmtT2TotalTime()},
		}...)
		return WriteJSON(w, o)
	}
	var b strings.Builder
	kv := func(k, v string) { fmt.Fprintf(&b, "%-40s: %s\n", k, v) }
	fmt.Fprintf(&b, "Smart Log for NVME device:%s namespace-id:%x\n", devname, nsid)
	kv("critical_warning", hx(uint64(l.CriticalWarning())))
	kv("temperature", celsius(l.CompositeTemperature()))
	kv("available_spare", fmt.Sprintf("%d%%", l.AvailableSpare()))
	kv("available_spare_threshold", fmt.Sprintf("%d%%", l.AvailableSpareThreshold()))
	kv("percentage_used", fmt.Sprintf("%d%%", l.PercentageUsed()))
	kv("endurance group critical warning summary", hx(uint64(l.EnduranceGroupCriticalWarning())))
	kv("data_units_read", dataUnits(l.DataUnitsRead()))
	kv("data_units_written", dataUnits(l.DataUnitsWritten()))
	kv("host_read_commands", l.HostReadCommands().String())
	kv("host_write_commands", l.HostWriteCommands().String())
	kv("controller_busy_time", l.ControllerBusyTime().String())
	kv("power_cycles", l.PowerCycles().String())
	kv("power_on_hours", l.PowerOnHours().String())
	kv("unsafe_shutdowns", l.UnsafeShutdowns().String())
	kv("media_errors", l.MediaErrors().String())
	kv("num_err_log_entries", l.ErrorLogEntries().String())
	kv("Warning Temperature Time", strconv.FormatUint(uint64(l.WarningTemperatureTime()), 10))
	kv("Critical Composite Temperature Time", strconv.FormatUint(uint64(l.CriticalTemperatureTime()), 10))
	for i := range 8 {
		if t := l.TemperatureSensor(i); t != 0 {
			kv(fmt.Sprintf("Temperature Sensor %d", i+1), celsius(t))
		}
	}
	kv("Thermal Management T1 Trans Count", strconv.FormatUint(uint64(l.ThermalMgmtT1TransitionCount()), 10))
	kv("Thermal Management T2 Trans Count", strconv.FormatUint(uint64(l.ThermalMgmtT2TransitionCount()), 10))
	kv("Thermal Management T1 Total Time", strconv.FormatUint(uint64(l.ThermalMgmtT1TotalTime()), 10))
	kv("Thermal Management T2 Total Time", strconv.FormatUint(uint64(l.ThermalMgmtT2TotalTime()), 10))
	_, err := io.WriteString(w, b.String())
	return err
}

// ---- list (nvme list) ----

// siSuffix scales v as nvme-cli's suffix_si_get.
func siSuffix(v float64) (float64, string) {
	for _, s := range []struct {
		mag float64
		s   string
	}{{1e15, "P"}, {1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if v >= s.mag {
			return v / s.mag, s.s
		}
	}
	return v, ""
}

// binSuffix scales v as nvme-cli's suffix_binary_get (rounded to the
// nearest unit).
func binSuffix(v int64) (int64, string) {
	for _, s := range []struct {
		shift uint
		s     string
	}{{60, "Ei"}, {50, "Pi"}, {40, "Ti"}, {30, "Gi"}, {20, "Mi"}, {10, "Ki"}} {
		if v >= 1<<s.shift {
			return (v + 1<<(s.shift-1)) >> s.shift, s.s
		}
	}
	return v, ""
}

// listRow is one namespace of `nvmeof list`.
type listRow struct {
	ctrl *session.State
	ns   session.Namespace
}

func listRows(states []*session.State) []listRow {
	var rows []listRow
	for _, st := range states {
		for _, ns := range st.Namespaces {
			rows = append(rows, listRow{st, ns})
		}
	}
	return rows
}

// List prints the namespaces of the connected controllers as
// `nvme list` (Node is the mapped block device, Generic the name the
// nvmeof commands take) with the controller's state (live, connecting,
// resetting, deleting) in a last column, and, in JSON, nvme-cli's "Devices" array with the
// controller's name, address and state added.
func List(w io.Writer, format string, states []*session.State) error {
	rows := listRows(states)
	if format == JSON {
		devs := make([]Obj, 0, len(rows))
		for i, r := range rows {
			bs := uint64(r.ns.BlockSize)
			node := r.ns.Device
			dev := Obj{
				{"NameSpace", r.ns.NSID},
				{"DevicePath", node},
				{"GenericPath", r.ns.Generic},
				{"Firmware", r.ctrl.Firmware},
				{"Index", i},
				{"ModelNumber", r.ctrl.Model},
				{"SerialNumber", r.ctrl.Serial},
				{"UsedBytes", r.ns.NUSE * bs},
				{"MaximumLBA", r.ns.NSZE},
				{"PhysicalSize", r.ns.NSZE * bs},
				{"SectorSize", bs},
				{"Controller", r.ctrl.Name},
				{"SubsystemNQN", r.ctrl.SubsysNQN},
				{"Transport", r.ctrl.Transport},
				{"Address", r.ctrl.Address()},
				{"State", r.ctrl.State},
			}
			if len(r.ctrl.Paths) > 0 {
				dev = append(dev, KV{"Paths", listNSPaths(r.ctrl, r.ns)})
			}
			devs = append(devs, dev)
		}
		return WriteJSON(w, Obj{{"Devices", devs}})
	}
	// A Paths column (each path's name and the namespace's ANA state
	// there) when a subsystem has more than one path.
	multi := false
	for _, st := range states {
		multi = multi || len(st.Paths) > 1
	}
	var b strings.Builder
	head := fmt.Sprintf("%-21s %-21s %-20s %-40s %-10s %-26s %-16s %-8s %-10s",
		"Node", "Generic", "SN", "Model", "Namespace", "Usage", "Format", "FW Rev", "State")
	rule := fmt.Sprintf("%s %s %s %s %s %s %s %s %s", strings.Repeat("-", 21), strings.Repeat("-", 21),
		strings.Repeat("-", 20), strings.Repeat("-", 40), strings.Repeat("-", 10),
		strings.Repeat("-", 26), strings.Repeat("-", 16), strings.Repeat("-", 8), strings.Repeat("-", 10))
	if multi {
		head += " Paths"
		rule += " " + strings.Repeat("-", 40)
	}
	b.WriteString(head + "\n" + rule + "\n")
	for _, r := range rows {
		bs := int64(r.ns.BlockSize)
		nsze, sSuf := siSuffix(float64(r.ns.NSZE) * float64(bs))
		nuse, uSuf := siSuffix(float64(r.ns.NUSE) * float64(bs))
		lba, lSuf := binSuffix(bs)
		usage := fmt.Sprintf("%6.2f %2sB / %6.2f %2sB", nuse, uSuf, nsze, sSuf)
		fmtStr := fmt.Sprintf("%3d %2sB + %2d B", lba, lSuf, r.ns.MetaSize)
		node := r.ns.Device
		if node == "" {
			node = "-"
		}
		line := fmt.Sprintf("%-21s %-21s %-20s %-40s %-10s %-26s %-16s %-8s %-10s", node, r.ns.Generic,
			r.ctrl.Serial, r.ctrl.Model, hx(uint64(r.ns.NSID)), usage, fmtStr, r.ctrl.Firmware, r.ctrl.State)
		if multi && len(r.ctrl.Paths) > 0 {
			var ps []string
			for _, p := range pathsOf(r.ctrl, r.ns.NSID) {
				ps = append(ps, p.name+":"+p.state+":"+p.ana)
			}
			line += " " + strings.Join(ps, ",")
		}
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// listNSPaths returns a namespace's paths for `nvmeof list -o json`: each
// controller's name, address, state and the namespace's ANA state there.
func listNSPaths(st *session.State, ns session.Namespace) []Obj {
	out := []Obj{}
	for _, p := range pathsOf(st, ns.NSID) {
		o := Obj{{"Name", p.name}, {"Transport", p.transport}, {"Address", p.address}, {"State", p.state}}
		if p.ana != "" {
			o = append(o, KV{"ANAState", p.ana})
		}
		for _, np := range ns.Paths {
			if np.Path == p.name && np.Current {
				o = append(o, KV{"Current", true})
			}
		}
		out = append(out, o)
	}
	return out
}

// ---- connect ----

// Connected prints what connect made: the mapped devices, one per line,
// then the controller name (JSON: nvme-cli's {"device": ...} plus the
// namespaces).
func Connected(w io.Writer, format string, st *session.State) error {
	if format == JSON {
		var nss []Obj
		for _, ns := range st.Namespaces {
			nss = append(nss, Obj{{"nsid", ns.NSID}, {"generic", ns.Generic}, {"device", ns.Device}})
		}
		return WriteJSON(w, Obj{{"device", st.Name}, {"subsysnqn", st.SubsysNQN}, {"namespaces", nss}})
	}
	for _, ns := range st.Namespaces {
		if ns.Device != "" {
			fmt.Fprintln(w, ns.Device)
		}
	}
	fmt.Fprintln(w, st.Name)
	return nil
}
