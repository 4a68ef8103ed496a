package hostcli

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nvmeof/nvmeof/initiator/session"
)

func TestParseDiscoveryConf(t *testing.T) {
	for _, tt := range []struct {
		name, src string
		want      []confLine
		wantErr   string
	}{
		{name: "nvme-cli's example", src: "# Used for extracting default controller connection parameters\n" +
			"#\n# Example:\n# --transport=<trtype> --traddr=<traddr> --trsvcid=<trsvcid> --host-traddr=<host-traddr> --host-iface=<host-iface>\n" +
			"--transport=rdma --traddr=192.0.2.1 --trsvcid=4420\n\n  -t rdma   -a 192.0.2.2\t-q nqn.2014-08.org.nvmexpress:uuid:5a3c6b1e-8f2d-4c7a-9e01-3b5d7f9a1c2e\n",
			want: []confLine{{5, []string{"--transport=rdma", "--traddr=192.0.2.1", "--trsvcid=4420"}},
				{7, []string{"-t", "rdma", "-a", "192.0.2.2", "-q", "nqn.2014-08.org.nvmexpress:uuid:5a3c6b1e-8f2d-4c7a-9e01-3b5d7f9a1c2e"}}}},
		{name: "empty", src: "\n# nothing\n"},
		{name: "not a flag", src: "--traddr=192.0.2.1\nrdma 192.0.2.2\n", wantErr: `line 2: "rdma" is not a flag`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseDiscoveryConf([]byte(tt.src))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func FuzzParseDiscoveryConf(f *testing.F) {
	f.Add([]byte("--transport=rdma --traddr=192.0.2.1 --trsvcid=4420\n# c\n"))
	f.Add([]byte("x\n\n-a\t1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		lines, err := parseDiscoveryConf(data)
		for _, l := range lines {
			if l.line < 1 || len(l.args) == 0 || !strings.HasPrefix(l.args[0], "-") {
				t.Fatalf("bad line %+v (err %v)", l, err)
			}
		}
	})
}

// TestConnectAllDiscoveryConf: connect-all without -a connects what the
// discovery controllers of --discovery-conf list (here one in-process
// target), with the command line's flags; a broken line is named with its
// line number.
func TestConnectAllDiscoveryConf(t *testing.T) {
	nqn := "nqn.2026-11.io.nvmeof:conf"
	startSoftTarget(t, "127.61.9.1", nqn)
	dir := t.TempDir()
	runDir := filepath.Join(dir, "run")
	conf := filepath.Join(dir, "discovery.conf")
	cli := runDirCLI(t, runDir)
	if err := os.WriteFile(conf, []byte("# test\n--transport=rdma --traddr=127.61.9.1 --trsvcid=4420 --host-traddr=127.61.9.2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := cli("connect-all", "--discovery-conf", conf, "--provider", "soft", "-q", tHost, "--map", "none", "--timeout", "30s")
	if code != 0 {
		t.Fatalf("connect-all: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	live, _, err := session.Scan(runDir)
	if err != nil || len(live) != 1 || live[0].State == nil || live[0].State.SubsysNQN != nqn || live[0].State.HostNQN != tHost {
		t.Fatalf("after connect-all: %v, %+v; stdout %q stderr %q", err, live, out, errs)
	}

	if err := os.WriteFile(conf, []byte("\n--transport=rdma --trsvcid=4420\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := cli("connect-all", "--discovery-conf", conf); code == 0 || !strings.Contains(errs, conf+":2: no --traddr") {
		t.Errorf("a line without --traddr: exit %d, stderr %q", code, errs)
	}
	if code, _, errs := cli("connect-all", "--discovery-conf", filepath.Join(dir, "none.conf")); code == 0 || !strings.Contains(errs, "no --traddr, and open") {
		t.Errorf("a missing file: exit %d, stderr %q", code, errs)
	}
}
