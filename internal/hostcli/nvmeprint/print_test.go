package nvmeprint

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/initiator/session"
	"github.com/nvmeof/nvmeof/nvme"
)

// The host NQN and subsystem NQN in the golden files.
const (
	tHost       = "nqn.2014-08.org.nvmexpress:uuid:5a3c1b2e-0b7a-4c1e-9d8f-0123456789ab"
	selftestNQN = "nqn.2026-11.io.nvmeof:default"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name (or rewrites it with -update).
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// fixedIDCtrl is an Identify Controller as our target fills it for a
// fabrics controller, with a power state.
func fixedIDCtrl(t *testing.T) nvme.IdentifyController {
	c := nvme.NewIdentifyController()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	c.SetVID(0)
	c.SetSSVID(0)
	must(c.SetSN("NVMEOF0001"))
	must(c.SetMN("nvmeof"))
	must(c.SetFR("0.1"))
	c.SetRAB(6)
	c.SetIEEE(0x5cd2e4)
	c.SetCMIC(0x0b)
	c.SetMDTS(5)
	c.SetCNTLID(1)
	c.SetVER(0x10400)
	c.SetOAES(0x900)
	c.SetCTRATT(0x8000)
	c.SetCNTRLTYPE(1)
	c.SetFGUID([16]byte{0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 1, 2, 3, 4, 5, 6, 7, 8})
	c.SetOACS(0)
	c.SetACL(3)
	c.SetAERL(3)
	c.SetFRMW(0x3)
	c.SetLPA(0x7)
	c.SetELPE(127)
	c.SetNPSS(0)
	c.SetWCTEMP(343)
	c.SetCCTEMP(373)
	c.SetTNVMCAP(nvme.Uint128{Lo: 1 << 40, Hi: 1})
	c.SetKAS(10)
	c.SetANACAP(0x47)
	c.SetANAGRPMAX(32)
	c.SetNANAGRPID(32)
	c.SetSQES(0x66)
	c.SetCQES(0x44)
	c.SetMAXCMD(128)
	c.SetNN(1024)
	c.SetONCS(0x5d)
	c.SetFUSES(0)
	c.SetFNA(0)
	c.SetVWC(0x7)
	c.SetAWUPF(0)
	c.SetSGLS(0x100005)
	must(c.SetSUBNQN(selftestNQN))
	c.SetIOCCSZ(516)
	c.SetIORCSZ(1)
	c.SetICDOFF(0)
	c.SetFCATT(0)
	c.SetMSDBD(1)
	c.SetOFCS(0)
	ps := c.PowerState(0)
	ps.SetMP(2500)
	ps.SetENLAT(10)
	ps.SetEXLAT(20)
	ps.SetIDLP(500)
	ps.SetIPS(2)
	return c
}

func fixedIDNS() nvme.IdentifyNamespace {
	n := nvme.NewIdentifyNamespace()
	n.SetNSZE(0x200000)
	n.SetNCAP(0x200000)
	n.SetNUSE(0x1000)
	n.SetNSFEAT(0x14)
	n.SetNLBAF(1)
	n.SetFormatIndex(0)
	n.SetDLFEAT(1)
	n.SetNOWS(7)
	n.SetNPWG(7)
	n.SetMSSRL(256)
	n.SetMCL(256)
	n.SetMSRC(0)
	n.SetANAGRPID(1)
	n.SetNVMCAP(nvme.U128(1 << 30))
	n.SetLBAF(0, nvme.LBAFormat{LBADS: 9})
	n.SetLBAF(1, nvme.LBAFormat{LBADS: 12, MS: 8, RP: 1})
	n.SetNGUID([16]byte{0xaa, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 0xff})
	n.SetEUI64([8]byte{0xbb, 2, 3, 4, 5, 6, 7, 8})
	return n
}

func fixedSMART() nvme.SMARTLog {
	l := nvme.SMARTLog(make([]byte, 512))
	l.SetCriticalWarning(0)
	l.SetCompositeTemperature(308)
	l.SetAvailableSpare(100)
	l.SetAvailableSpareThreshold(10)
	l.SetPercentageUsed(3)
	l.SetDataUnitsRead(nvme.U128(1234567))
	l.SetDataUnitsWritten(nvme.U128(7654321))
	l.SetHostReadCommands(nvme.U128(99887766))
	l.SetHostWriteCommands(nvme.U128(55443322))
	l.SetControllerBusyTime(nvme.U128(42))
	l.SetPowerCycles(nvme.U128(7))
	l.SetPowerOnHours(nvme.Uint128{Lo: 0, Hi: 1}) // 2^64: a 128-bit value
	l.SetTemperatureSensor(0, 310)
	l.SetThermalMgmtT1TotalTime(3)
	return l
}

func fixedDiscovery() []initiator.DiscoveryEntry {
	return []initiator.DiscoveryEntry{
		{DiscoveryRecord: fabrics.DiscoveryRecord{TRType: fabrics.TRTypeRDMA, AdrFam: fabrics.AdrFamIPv4, SubType: fabrics.SubTypeCurrentDiscovery,
			TREQ: fabrics.TREQNotSpecified | fabrics.TREQDisableSQFlow, PortID: 1, CntlID: 0xffff, ASQSZ: 32,
			EFlags: fabrics.EFlagsEPCSD | fabrics.EFlagsDupRetInfo, TRSVCID: "4420", SubNQN: fabrics.DiscoveryNQN,
			TRADDR: "192.0.2.1", TSAS: fabrics.RDMATSAS(fabrics.RDMAQPTypeRC, fabrics.RDMAPRTypeNone, fabrics.RDMACMSRDMACM, 0)}},
		{DiscoveryRecord: fabrics.DiscoveryRecord{TRType: fabrics.TRTypeRDMA, AdrFam: fabrics.AdrFamIPv4, SubType: fabrics.SubTypeNVM,
			TREQ: fabrics.TREQNotRequired | fabrics.TREQDisableSQFlow, PortID: 1, CntlID: 0xffff, ASQSZ: 32,
			TRSVCID: "4420", SubNQN: "nqn.2026-11.io.nvmeof:disk0", TRADDR: "192.0.2.1",
			TSAS: fabrics.RDMATSAS(fabrics.RDMAQPTypeRC, fabrics.RDMAPRTypeRoCEv2, fabrics.RDMACMSRDMACM, 0xffff)}},
		{DiscoveryRecord: fabrics.DiscoveryRecord{TRType: fabrics.TRTypeLoop, AdrFam: fabrics.AdrFamLoop, SubType: fabrics.SubTypeNVM,
			PortID: 2, CntlID: 0xffff, ASQSZ: 32, SubNQN: "nqn.2026-11.io.nvmeof:loop"}},
	}
}

func fixedStates() []*session.State {
	started := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	return []*session.State{
		{Name: "nvmeof0", PID: 100, State: "live", Transport: "rdma", Traddr: "192.0.2.1", Trsvcid: "4420",
			HostTraddr: "192.0.2.2", SubsysNQN: "nqn.2026-11.io.nvmeof:disk0", HostNQN: tHost, CntlID: 1,
			Serial: "NVMEOF0001", Model: "nvmeof", Firmware: "0.1", IOQueues: 2, QueueSize: 128, KATO: 5, Started: started,
			Namespaces: []session.Namespace{
				{NSID: 1, Generic: "nvmeof0n1", Device: "/dev/loop3", Method: "fuse+loop", BlockSize: 512, NSZE: 2097152, NUSE: 131072},
				{NSID: 2, Generic: "nvmeof0n2", Device: "/dev/loop4", Method: "fuse+loop", BlockSize: 4096, NSZE: 262144, NUSE: 262144, MetaSize: 8},
			}},
		{Name: "nvmeof1", PID: 101, State: "connecting", Transport: "rdma", Traddr: "192.0.2.9", Trsvcid: "4421",
			SubsysNQN: "nqn.2026-11.io.nvmeof:disk1", Serial: "SER2", Model: "a much longer model name for wide columns", Firmware: "1.0",
			Namespaces: []session.Namespace{{NSID: 1, Generic: "nvmeof1n1", BlockSize: 512, NSZE: 1 << 31}}},
	}
}

func render(t *testing.T, f func(w *bytes.Buffer) error) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := f(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// goldenOutputs renders out in both formats, compares them with the golden
// files name.txt and name.json, checks that the normal output holds each
// of nvmeCLI's lines, and returns the JSON output.
func goldenOutputs(t *testing.T, name string, out func(format string) func(w *bytes.Buffer) error, nvmeCLI []string) []byte {
	t.Helper()
	text := render(t, out(Normal))
	golden(t, name+".txt", text)
	for _, l := range nvmeCLI {
		if !strings.Contains(string(text), l) {
			t.Errorf("normal output lacks nvme-cli's %q", l)
		}
	}
	js := render(t, out(JSON))
	golden(t, name+".json", js)
	return js
}

func TestGoldenOutput(t *testing.T) {
	idc := fixedIDCtrl(t)
	idns := fixedIDNS()
	smart := fixedSMART()
	disc := fixedDiscovery()
	states := fixedStates()
	tests := []struct {
		name string
		out  func(format string) func(w *bytes.Buffer) error
		// lines nvme-cli prints for these values, checked against
		// nvme-cli's format strings independently of the golden files.
		nvmeCLI []string
	}{
		{"id-ctrl", func(f string) func(*bytes.Buffer) error {
			return func(w *bytes.Buffer) error { return IDCtrl(w, f, idc) }
		}, []string{"NVME Identify Controller:", "vid       : 0\n", "sn        : NVMEOF0001\n", "ieee      : 5cd2e4\n",
			"cmic      : 0xb\n", "ver       : 0x10400\n", "subnqn    : " + selftestNQN + "\n", "ioccsz    : 516\n",
			"iorcsz    : 1\n", "icdoff    : 0\n", "fcatt     : 0\n", "msdbd     : 1\n", "ofcs      : 0\n",
			"tnvmcap   : 18446745173221179392\n", "sqes      : 0x66\n",
			"ps    0 : mp:25.00W operational enlat:10 exlat:20 rrt:0 rrl:0\n          rwt:0 rwl:0 idle_power:5.00W active_power:-\n"}},
		{"id-ns", func(f string) func(*bytes.Buffer) error {
			return func(w *bytes.Buffer) error { return IDNS(w, f, 1, idns) }
		}, []string{"NVME Identify Namespace 1:\n", "nsze    : 0x200000\n", "nuse    : 0x1000\n", "nsfeat  : 0x14\n",
			"nlbaf   : 1\n", "flbas   : 0\n", "dlfeat  : 1\n", "npwg    : 7\n", "nguid   : aa0102030405060708090a0b0c0d0eff\n",
			"eui64   : bb02030405060708\n", "lbaf  0 : ms:0   lbads:9  rp:0 (in use)\n", "lbaf  1 : ms:8   lbads:12 rp:0x1\n"}},
		{"smart-log", func(f string) func(*bytes.Buffer) error {
			return func(w *bytes.Buffer) error { return SMART(w, f, "nvmeof0", nvme.NSIDAll, smart) }
		}, []string{"Smart Log for NVME device:nvmeof0 namespace-id:ffffffff\n", "critical_warning",
			"temperature                             : 35 °C (308 K)\n", "available_spare                         : 100%\n",
			"data_units_read                         : 1234567 (632.10 GB)\n", "power_on_hours                          : 18446744073709551616\n",
			"Temperature Sensor 1"}},
		{"discover", func(f string) func(*bytes.Buffer) error {
			return func(w *bytes.Buffer) error { return Discovery(w, f, 5, disc) }
		}, []string{"\nDiscovery Log Number of Records 3, Generation counter 5\n", "=====Discovery Log Entry 0======\n",
			"trtype:  rdma\n", "adrfam:  ipv4\n", "subtype: current discovery subsystem\n",
			"treq:    not specified, sq flow control disable supported\n", "portid:  1\n", "trsvcid: 4420\n",
			"subnqn:  nqn.2014-08.org.nvmexpress.discovery\n", "traddr:  192.0.2.1\n",
			"eflags:  explicit discovery connections, duplicate discovery information\n",
			"rdma_prtype: not specified\n", "rdma_qptype: connected\n", "rdma_cms:    rdma-cm\n", "rdma_pkey: 0x0000\n",
			"rdma_prtype: roce-v2\n", "rdma_pkey: 0xffff\n", "eflags:  none\n", "adrfam:  \n"}},
		{"list", func(f string) func(*bytes.Buffer) error {
			return func(w *bytes.Buffer) error { return List(w, f, states) }
		}, []string{"Node                  Generic               SN                   Model                                    Namespace  Usage                      Format           FW Rev   State",
			"/dev/loop3            nvmeof0n1             NVMEOF0001           nvmeof                                   0x1         67.11  MB /   1.07  GB    512   B +  0 B   0.1      live\n",
			"  4 KiB +  8 B", "-                     nvmeof1n1", " connecting\n"}},
		{"list-multipath", func(f string) func(*bytes.Buffer) error {
			return func(w *bytes.Buffer) error { return List(w, f, fixedMultipathStates()) }
		}, []string{"FW Rev   State      Paths\n", " live       nvmeof0:connecting:inaccessible,nvmeof0c1:live:non-optimized\n"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			js := goldenOutputs(t, tc.name, tc.out, tc.nvmeCLI)
			var v map[string]any
			if err := json.Unmarshal(js, &v); err != nil {
				t.Fatalf("JSON output does not parse: %v", err)
			}
		})
	}
}

// TestJSONKeys checks the JSON keys scripts written for nvme-cli read.
func TestJSONKeys(t *testing.T) {
	get := func(f func(w *bytes.Buffer) error) map[string]any {
		var v map[string]any
		if err := json.Unmarshal(render(t, f), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	idc := get(func(w *bytes.Buffer) error { return IDCtrl(w, JSON, fixedIDCtrl(t)) })
	if idc["sn"] != "NVMEOF0001" || idc["subnqn"] != selftestNQN || idc["ioccsz"] != 516.0 || idc["mdts"] != 5.0 {
		t.Errorf("id-ctrl JSON: sn %v subnqn %v ioccsz %v mdts %v", idc["sn"], idc["subnqn"], idc["ioccsz"], idc["mdts"])
	}
	ns := get(func(w *bytes.Buffer) error { return IDNS(w, JSON, 1, fixedIDNS()) })
	if ns["nsze"] != float64(0x200000) || len(ns["lbafs"].([]any)) != 2 {
		t.Errorf("id-ns JSON: nsze %v lbafs %v", ns["nsze"], ns["lbafs"])
	}
	sm := get(func(w *bytes.Buffer) error { return SMART(w, JSON, "x", nvme.NSIDAll, fixedSMART()) })
	if sm["temperature"] != 308.0 || sm["avail_spare"] != 100.0 || sm["data_units_read"] != 1234567.0 {
		t.Errorf("smart-log JSON: %v", sm)
	}
	d := get(func(w *bytes.Buffer) error { return Discovery(w, JSON, 5, fixedDiscovery()) })
	recs := d["records"].([]any)
	if d["genctr"] != 5.0 || len(recs) != 3 || recs[1].(map[string]any)["rdma_prtype"] != "roce-v2" {
		t.Errorf("discovery JSON: %v", d)
	}
	l := get(func(w *bytes.Buffer) error { return List(w, JSON, fixedStates()) })
	devs := l["Devices"].([]any)
	d0 := devs[0].(map[string]any)
	if len(devs) != 3 || d0["DevicePath"] != "/dev/loop3" || d0["PhysicalSize"] != float64(2097152*512) || d0["SectorSize"] != 512.0 {
		t.Errorf("list JSON: %v", l)
	}
}

func TestTreqEflagsStrings(t *testing.T) {
	tests := []struct {
		treq uint8
		want string
	}{
		{0, "not specified"}, {1, "required"}, {2, "not required"},
		{4, "not specified, sq flow control disable supported"},
		{6, "not required, sq flow control disable supported"},
		{3, "unrecognized"}, {8, "unrecognized"},
	}
	for _, tc := range tests {
		if got := treqStr(tc.treq); got != tc.want {
			t.Errorf("treqStr(%d) = %q, want %q", tc.treq, got, tc.want)
		}
	}
	for e, want := range map[uint16]string{0: "none", 1: "duplicate discovery information", 2: "explicit discovery connections",
		4: "no cdc connectivity", 7: "explicit discovery connections, duplicate discovery information, no cdc connectivity", 8: "unrecognized"} {
		if got := eflagsStr(e); got != want {
			t.Errorf("eflagsStr(%d) = %q, want %q", e, got, want)
		}
	}
	if hx(0) != "0" || hx(0x1f) != "0x1f" {
		t.Error("hx does not format as C printf alternate hex does")
	}
}
