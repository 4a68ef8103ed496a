package hostcli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/initiator/session"
	"github.com/nvmeof/nvmeof/target/server"
)

// e2eTargetHCL is an nvmetd configuration served in-process over the soft
// RoCE provider: one subsystem, two namespaces with known identifiers.
const e2eTargetHCL = `port "p0" {
  transport = "rdma"
  provider  = "soft"
  address   = %q
  service   = 4420
}

subsystem %q {
  ports          = ["p0"]
  allow_any_host = true
  serial         = "E2ESERIAL1"
  model          = "nvmeof-e2e"

  namespace "1" {
    backend = "memory"
    size    = "1MiB"
    uuid    = "7d1a4c2e-3f5b-4a6d-8e9f-0a1b2c3d4e5f"
    nguid   = "00112233445566778899aabbccddeeff"
  }
  namespace "2" {
    backend = "memory"
    size    = "2MiB"
  }
}
`

// softTargetTree is e2eTargetHCL on addr with subsystem nqn.
func softTargetTree(t *testing.T, addr, nqn string) *configfs.Tree {
	t.Helper()
	tree, err := configfs.ParseHCL([]byte(fmt.Sprintf(e2eTargetHCL, addr, nqn)), "e2e.hcl")
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// startSoftTarget serves e2eTargetHCL in this process on addr; the
// server takes changed trees (softTargetTree) until the test ends.
func startSoftTarget(t *testing.T, addr, nqn string) *server.Server {
	t.Helper()
	srv := server.New(server.Options{Logger: hclog.NewNullLogger()})
	if err := srv.Apply(softTargetTree(t, addr, nqn)); err != nil {
		srv.Close()
		t.Skipf("cannot serve on %s with the soft provider: %v", addr, err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// e2eSession connects one controller through a connection daemon to an
// in-process target and returns a CLI runner bound to its run directory.
func e2eSession(t *testing.T, target, host string, extra ...string) (cli func(args ...string) (int, string, string), runDir string, connect []string) {
	t.Helper()
	nqn := "nqn.2026-11.io.nvmeof:e2e"
	startSoftTarget(t, target, nqn)
	runDir = filepath.Join(t.TempDir(), "run")
	cli = runDirCLI(t, runDir)
	connect = []string{"connect", "-t", "rdma", "-a", target, "-s", "4420", "--provider", "soft", "-w", host,
		"-n", nqn, "-q", tHost, "--map", "none", "--timeout", "30s", "-o", "json"}
	code, out, errs := cli(append(connect, extra...)...)
	if code != 0 {
		t.Fatalf("connect: exit %d, stderr %q", code, errs)
	}
	var made struct {
		Device string `json:"device"`
	}
	if err := json.Unmarshal([]byte(out), &made); err != nil || made.Device != "nvmeof0" {
		t.Fatalf("connect printed %q: %v", out, err)
	}
	return cli, runDir, connect
}

// TestNVMeCLICommands runs list-subsys, get-log, error-log, ns-descs,
// get-feature and reset against an in-process nvmetd over the soft RoCE
// provider and checks the values they print against what the target was
// configured with and what the connection daemon reports.
func TestNVMeCLICommands(t *testing.T) {
	cli, runDir, connect := e2eSession(t, "127.61.3.1", "127.61.3.2", "--fast_io_fail_tmo", "5", "-T", "32")
	must := func(args ...string) string {
		t.Helper()
		code, out, errs := cli(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errs)
		}
		return out
	}
	live, _, err := session.Scan(runDir)
	if err != nil || len(live) != 1 || live[0].State == nil {
		t.Fatalf("scan: %v, %d daemons", err, len(live))
	}
	st := live[0].State

	t.Run("list-subsys", func(t *testing.T) {
		out := must("list-subsys")
		want := "nvmeof-subsys0 - NQN=nqn.2026-11.io.nvmeof:e2e\n" +
			"                 hostnqn=" + tHost + "\n" +
			"                 iopolicy=numa\n" +
			"\\\n" +
			" +- nvmeof0 rdma traddr=127.61.3.1,trsvcid=4420 live optimized\n"
		if out != want {
			t.Errorf("list-subsys:\n%s\nwant:\n%s", out, want)
		}
		var js []struct {
			HostNQN    string
			HostID     string
			Subsystems []struct {
				Name, NQN, IOPolicy string
				Paths               []struct{ Name, Transport, Address, State string }
			}
		}
		if err := json.Unmarshal([]byte(must("list-subsys", "-o", "json")), &js); err != nil {
			t.Fatal(err)
		}
		if len(js) != 1 || js[0].HostNQN != tHost || js[0].HostID != st.HostID || len(js[0].Subsystems) != 1 ||
			js[0].Subsystems[0].NQN != "nqn.2026-11.io.nvmeof:e2e" || len(js[0].Subsystems[0].Paths) != 1 ||
			js[0].Subsystems[0].Paths[0].State != "live" || js[0].Subsystems[0].Paths[0].Name != "nvmeof0" {
			t.Errorf("list-subsys -o json: %+v", js)
		}
		if out := must("list-subsys", "nvmeof0n2"); out != want {
			t.Errorf("list-subsys nvmeof0n2: %q", out)
		}
	})

	t.Run("ana-log", func(t *testing.T) {
		want := "Asymmetric Namespace Access Log for NVMe device: nvmeof0\n" +
			"ANA LOG HEADER :-\nchgcnt\t:\t0\nngrps\t:\t1\nANA Log Desc :-\n" +
			"grpid\t:\t1\nnnsids\t:\t2\nchgcnt\t:\t0\nstate\t:\toptimized\n\tnsid\t:\t1\n\tnsid\t:\t2\n\n"
		if out := must("ana-log", "nvmeof0"); out != want {
			t.Errorf("ana-log:\n%q\nwant:\n%q", out, want)
		}
		if out := must("ana-log", "nvmeof0", "-g"); !strings.Contains(out, "nnsids\t:\t0\n") || strings.Contains(out, "nsid\t:\t1") {
			t.Errorf("ana-log -g lists NSIDs:\n%s", out)
		}
		var js struct {
			Dev   string `json:"Asymmetric Namespace Access Log for NVMe device"`
			Ngrps int    `json:"ngrps"`
			Descs []struct {
				GrpID uint32 `json:"grpid"`
				State string `json:"state"`
				NSIDs []struct {
					NSID uint32 `json:"nsid"`
				} `json:"NSIDS"`
			} `json:"ANA DESC LIST "`
		}
		if err := json.Unmarshal([]byte(must("ana-log", "nvmeof0", "-o", "json")), &js); err != nil {
			t.Fatal(err)
		}
		if js.Dev != "nvmeof0" || js.Ngrps != 1 || len(js.Descs) != 1 || js.Descs[0].GrpID != 1 || js.Descs[0].State != "optimized" ||
			len(js.Descs[0].NSIDs) != 2 || js.Descs[0].NSIDs[1].NSID != 2 {
			t.Errorf("ana-log -o json: %+v", js)
		}
	})

	t.Run("rdma-stats", func(t *testing.T) {
		out := must("rdma-stats", "nvmeof0")
		if !strings.HasPrefix(out, "nvmeof0: RDMA device soft-127.61.3.2 (soft)\n") ||
			!regexp.MustCompile(`(?m)^  packets_sent +[1-9][0-9]*$`).MatchString(out) ||
			!regexp.MustCompile(`(?m)^  np_cnp_sent +0$`).MatchString(out) {
			t.Errorf("rdma-stats:\n%s", out)
		}
		var js []session.DeviceCounters
		if err := json.Unmarshal([]byte(must("rdma-stats", "nvmeof0n1", "-o", "json")), &js); err != nil {
			t.Fatal(err)
		}
		if len(js) != 1 || js[0].Provider != "soft" || js[0].Counters["packets_received"] == 0 {
			t.Errorf("rdma-stats -o json: %+v", js)
		}
	})

	t.Run("list state column", func(t *testing.T) {
		out := must("list")
		if !regexp.MustCompile(`(?m)^-\s+nvmeof0n1 .* live$`).MatchString(out) {
			t.Errorf("list has no live state for nvmeof0n1:\n%s", out)
		}
	})

	t.Run("get-log", func(t *testing.T) {
		raw := must("get-log", "nvmeof0", "-i", "2", "-l", "512", "-b")
		if len(raw) != 512 {
			t.Fatalf("get-log -b: %d bytes, want 512", len(raw))
		}
		// The same page through smart-log: the raw bytes agree.
		var sm map[string]any
		if err := json.Unmarshal([]byte(must("smart-log", "nvmeof0", "-o", "json")), &sm); err != nil {
			t.Fatal(err)
		}
		if k := int(raw[1]) | int(raw[2])<<8; float64(k) != sm["temperature"] {
			t.Errorf("get-log temperature %d K, smart-log %v", k, sm["temperature"])
		}
		txt := must("get-log", "nvmeof0", "--log-id", "2", "--log-len", "32")
		lines := strings.Split(strings.TrimSuffix(txt, "\n"), "\n")
		if len(lines) != 4 || lines[0] != "Device:nvmeof0 log-id:2 namespace-id:0xffffffff" ||
			!strings.HasPrefix(lines[1], "       0  1  2") || !strings.HasPrefix(lines[2], fmt.Sprintf("0000: %02x %02x %02x", raw[0], raw[1], raw[2])) ||
			!strings.HasPrefix(lines[3], "0010:") {
			t.Errorf("get-log text:\n%s", txt)
		}
		// LPO: 16 bytes from offset 16 are the page's bytes 16..31.
		part := must("get-log", "nvmeof0", "-i", "2", "-l", "16", "--lpo", "16", "-b")
		if !bytes.Equal([]byte(part), []byte(raw[16:32])) {
			t.Errorf("get-log --lpo 16: %x, want %x", part, raw[16:32])
		}
		var js struct {
			Device string   `json:"device"`
			LogID  int      `json:"log-id"`
			Data   []string `json:"data"`
		}
		if err := json.Unmarshal([]byte(must("get-log", "nvmeof0", "-i", "2", "-l", "32", "--output-format", "json")), &js); err != nil ||
			js.LogID != 2 || len(js.Data) != 2 || js.Data[0][:8] != fmt.Sprintf("%02x %02x %02x", raw[0], raw[1], raw[2]) {
			t.Errorf("get-log json: %+v, %v", js, err)
		}
		for _, bad := range [][]string{{"-i", "2"}, {"-l", "512"}, {"-i", "2", "-l", "6"}, {"-i", "300", "-l", "4"}} {
			if code, _, errs := cli(append([]string{"get-log", "nvmeof0"}, bad...)...); code != 1 || strings.Count(errs, "\n") != 1 {
				t.Errorf("get-log %v: exit %d, %q", bad, code, errs)
			}
		}
	})

	t.Run("error-log", func(t *testing.T) {
		var idc map[string]any
		if err := json.Unmarshal([]byte(must("id-ctrl", "nvmeof0", "-o", "json")), &idc); err != nil {
			t.Fatal(err)
		}
		entries := int(idc["elpe"].(float64)) + 1
		var js struct {
			Errors []map[string]any `json:"errors"`
		}
		if err := json.Unmarshal([]byte(must("error-log", "nvmeof0", "-o", "json")), &js); err != nil {
			t.Fatal(err)
		}
		if len(js.Errors) != entries {
			t.Errorf("error-log: %d entries, want ELPE+1 = %d", len(js.Errors), entries)
		}
		out := must("error-log", "nvmeof0", "-e", "1")
		if !strings.HasPrefix(out, "Error Log Entries for device:nvmeof0 entries:1\n.................\n Entry[ 0]   \n") {
			t.Errorf("error-log -e 1:\n%s", out)
		}
		if raw := must("error-log", "nvmeof0", "-e", "2", "-b"); len(raw) != 128 {
			t.Errorf("error-log -e 2 -b: %d bytes", len(raw))
		}
	})

	t.Run("ns-descs", func(t *testing.T) {
		out := must("ns-descs", "nvmeof0n1")
		for _, l := range []string{"NVME Namespace Identification Descriptors NS 1:\n",
			"uuid    : 7d1a4c2e-3f5b-4a6d-8e9f-0a1b2c3d4e5f\n", "nguid   : 00112233445566778899aabbccddeeff\n"} {
			if !strings.Contains(out, l) {
				t.Errorf("ns-descs lacks %q:\n%s", l, out)
			}
		}
		var js struct {
			Descs []map[string]any `json:"ns-descs"`
		}
		if err := json.Unmarshal([]byte(must("ns-descs", "nvmeof0", "-n", "1", "-o", "json")), &js); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, d := range js.Descs {
			if d["Type"] == "uuid" && d["uuid"] == "7d1a4c2e-3f5b-4a6d-8e9f-0a1b2c3d4e5f" && d["nidt"] == 3.0 && d["nidl"] == 16.0 {
				found = true
			}
		}
		if !found {
			t.Errorf("ns-descs json: %+v", js.Descs)
		}
		if code, _, errs := cli("ns-descs", "nvmeof0"); code != 1 || !strings.Contains(errs, "which namespace") {
			t.Errorf("ns-descs without a namespace on a 2-namespace controller: exit %d, %q", code, errs)
		}
	})

	t.Run("get-feature", func(t *testing.T) {
		// Number of Queues: NSQA+1 is at least the I/O queues connected.
		out := must("get-feature", "nvmeof0", "-f", "7", "-H")
		m := regexp.MustCompile(`get-feature:0x07 \(Number of Queues\), Current value:(0x[0-9a-f]{8})\n` +
			`\tNumber of IO Completion Queues Allocated \(NCQA\): (\d+)\n\tNumber of IO Submission Queues Allocated \(NSQA\): (\d+)\n$`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("get-feature -f 7 -H:\n%q", out)
		}
		var v, ncqa, nsqa int
		fmt.Sscanf(m[1], "0x%x", &v)
		fmt.Sscanf(m[2], "%d", &ncqa)
		fmt.Sscanf(m[3], "%d", &nsqa)
		if nsqa != v&0xffff+1 || ncqa != v>>16+1 || nsqa < st.IOQueues {
			t.Errorf("value %#x: NCQA %d NSQA %d, %d I/O queues connected", v, ncqa, nsqa, st.IOQueues)
		}
		// Keep Alive Timer: the KATO the host connected with, in ms.
		var js []map[string]any
		dec := json.NewDecoder(strings.NewReader(must("get-feature", "nvmeof0", "-f", "0x0f", "-H", "-o", "json")))
		for {
			var o map[string]any
			if err := dec.Decode(&o); err == io.EOF {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			js = append(js, o)
		}
		wantKATO := float64(st.KATO * 1000)
		if len(js) != 2 || js[0]["feature"] != "0x0f" || js[0]["name"] != "Keep Alive Timer" || js[0]["sel"] != "Current" ||
			js[0]["value"] != fmt.Sprintf("0x%08x", st.KATO*1000) || js[1]["Keep Alive Timeout (KATO) in milliseconds"] != wantKATO {
			t.Errorf("get-feature -f 0x0f -H -o json: %v (KATO %d s)", js, st.KATO)
		}
		// Without -f: every feature the controller answers, Number of Queues among them.
		if out := must("get-feature", "nvmeof0"); !strings.Contains(out, "get-feature:0x07 (Number of Queues), Current value:"+m[1]+"\n") {
			t.Errorf("get-feature without -f:\n%s", out)
		}
		if code, _, errs := cli("get-feature", "nvmeof0", "-f", "7", "-s", "9"); code != 1 || !strings.Contains(errs, "--sel 9") {
			t.Errorf("get-feature -s 9: exit %d, %q", code, errs)
		}
	})

	t.Run("duplicate-connect", func(t *testing.T) {
		code, _, errs := cli(connect...)
		if code != 1 || !strings.Contains(errs, "already connected as nvmeof0") || !strings.Contains(errs, "--duplicate-connect") {
			t.Fatalf("second connect: exit %d, %q; want a refusal naming nvmeof0 and -D", code, errs)
		}
		out := must(append(connect, "-D", "-w", "127.61.3.3")...)
		if !strings.Contains(out, `"device": "nvmeof1"`) {
			t.Fatalf("connect -D: %s", out)
		}
		var js []struct {
			Subsystems []struct {
				Paths []struct{ Name, State string }
			}
		}
		if err := json.Unmarshal([]byte(must("list-subsys", "-o", "json")), &js); err != nil {
			t.Fatal(err)
		}
		if len(js) != 1 || len(js[0].Subsystems) != 1 || len(js[0].Subsystems[0].Paths) != 2 {
			t.Errorf("list-subsys after -D: %+v, want two controllers of one subsystem", js)
		}
		must("disconnect", "-d", "nvmeof1")
	})

	t.Run("connect options in the daemon's log", func(t *testing.T) {
		log, err := os.ReadFile(session.LogPath(runDir, "nvmeof0"))
		if err != nil || !strings.Contains(string(log), "fast_io_fail_tmo=5") || !strings.Contains(string(log), "tos=32") ||
			!strings.Contains(string(log), "RDMA connections use the IP type of service of --tos") {
			t.Errorf("daemon log lacks the connect options or the --tos line: %v\n%s", err, log)
		}
	})

	t.Run("reset", func(t *testing.T) {
		before := must("id-ctrl", "nvmeof0", "-o", "json")
		must("reset", "nvmeof0")
		live, _, _ := session.Scan(runDir)
		if len(live) != 1 || live[0].State == nil || live[0].State.State != "live" {
			t.Fatalf("after reset: %+v", live)
		}
		// The controller answers on its new association.
		after := must("id-ctrl", "nvmeof0", "-o", "json")
		var b, a map[string]any
		_ = json.Unmarshal([]byte(before), &b)
		_ = json.Unmarshal([]byte(after), &a)
		if a["sn"] != b["sn"] || a["subnqn"] != "nqn.2026-11.io.nvmeof:e2e" {
			t.Errorf("id-ctrl after reset: sn %v, subnqn %v", a["sn"], a["subnqn"])
		}
		log, err := os.ReadFile(session.LogPath(runDir, "nvmeof0"))
		if err != nil || !strings.Contains(string(log), "controller reset") {
			t.Errorf("the daemon's log does not tell of the reset (%v)", err)
		}
	})

	t.Run("log kept after exit", func(t *testing.T) {
		must("disconnect", "-d", "nvmeof0")
		log, err := os.ReadFile(session.LogPath(runDir, "nvmeof0"))
		if err != nil || !strings.Contains(string(log), "disconnected; daemon exiting") {
			t.Errorf("the daemon's log after it exited: %v, %q", err, log)
		}
	})
}
