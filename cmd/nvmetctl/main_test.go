package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/control"
	"github.com/nvmeof/nvmeof/fabrics/loop"
	"github.com/nvmeof/nvmeof/target/server"
)

const nqn = "nqn.2026-11.io.nvmeof:ctl"

// serve runs a target over the loop transport with its control API on a
// socket in dir, and returns the socket.
func serve(t *testing.T, dir string) string {
	t.Helper()
	sock, _, _ := serveWith(t, dir, control.Options{})
	return sock
}

// serveWith is serve with the control API's options; it also returns the
// service and the configuration it applied.
func serveWith(t *testing.T, dir string, opts control.Options) (string, *control.Service, *configfs.Tree) {
	t.Helper()
	tree, err := configfs.ParseHCL([]byte(`
port "lp" {
  transport = "loop"
}
subsystem "`+nqn+`" {
  ports          = ["lp"]
  allow_any_host = true
  namespace "1" {
    backend = "memory"
    size    = "1MiB"
  }
}
`), "t.hcl")
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(server.Options{LoopNetwork: loop.NewNetwork()})
	t.Cleanup(func() { srv.Close() })
	svc := control.New(srv, opts)
	if err := svc.Apply(tree); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "c.sock")
	if err := svc.Listen(sock); err != nil {
		t.Fatal(err)
	}
	go svc.Serve()
	t.Cleanup(func() { svc.Close() })
	return sock, svc, tree
}

// TestCommands runs nvmetctl commands in order against one daemon: their
// output, errors and exit statuses.
func TestCommands(t *testing.T) {
	dir := t.TempDir()
	sock := serve(t, dir)
	t.Chdir(dir)
	saved := filepath.Join(dir, "saved.hcl")
	tests := []struct {
		args   string
		status int
		out    string // in stdout (status 0) or stderr
	}{
		{"subsystem list", 0, nqn + "  lp     any    1"},
		// The serial, model and bounds in effect, derived or default.
		{"subsystem list", 0, "1           b0138b93766ede5c4a6e  nvmeof"},
		{"-o json subsystem list", 0, `"serial": "b0138b93766ede5c4a6e",`},
		{"-o json subsystem list", 0, `"firmware": "0.1",`},
		{"-o json subsystem list", 0, `"qid_max": 128,`},
		{"-o json subsystem list", 0, `"max_controllers": 1024,`},
		{"-o json subsystem list", 0, `"max_controllers_per_host": 16,`},
		{"--version", 0, "nvmetctl version "},
		{"ns add " + nqn + " --path disk.img --size 2MiB", 0, "namespace 2 added to " + nqn + " (file, 2MiB)"},
		{"ns list " + nqn, 0, filepath.Join(dir, "disk.img")},
		{"ns resize " + nqn + " 2 4MiB", 0, "namespace 2 of " + nqn + ": 4MiB"},
		{"ns resize " + nqn + " 1 2MiB", 0, "namespace 1 of " + nqn + ": 2MiB"},
		{"ns resize " + nqn + " 1 1MiB", 1, "data is lost; force to do it"},
		{"ns resize " + nqn + " 2 --size 6MiB", 0, "namespace 2 of " + nqn + ": 6MiB"},
		{"ns resize --size 8MiB " + nqn + " 2", 0, "namespace 2 of " + nqn + ": 8MiB"},
		{"ns resize " + nqn + " 2 8MiB --size 8MiB", 2, "the size twice"},
		{"ns resize " + nqn + " 2 --size 8XB", 2, `size "8XB"`},
		{"ns disable " + nqn + " 2", 0, "namespace 2 of " + nqn + " disabled"},
		{"-o json ns list " + nqn, 0, `"enabled": false`},
		{"ns add " + nqn + " --backend memory", 1, "subsystems/" + nqn + "/namespaces/3: size: a size is required for backend memory"},
		{"subsystem modify " + nqn + " --allow-any-host=false", 0, "changed"},
		{"subsystem modify " + nqn + " --max-controllers 64 --max-controllers-per-host 4 --serial S1", 0, "changed"},
		{"-o json subsystem list", 0, `"max_controllers": 64,`},
		{"-o json subsystem list", 0, `"max_controllers_per_host": 4,`},
		{"subsystem list", 0, "S1"},
		{"host allow " + nqn + " nqn.2026-11.io.nvmeof:h1", 0, "allowed hosts nqn.2026-11.io.nvmeof:h1"},
		{"host list", 0, "nqn.2026-11.io.nvmeof:h1  -             " + nqn},
		{"port add p2 -t loop -s 4421 --subsystem " + nqn, 0, "port p2 added: loop :4421"},
		{"port list", 0, "p2  2       loop"},
		{"port ana-state p2 2 non-optimized", 0, "port p2: ANA group 2 non-optimized"},
		{"port list", 0, "1:optimized,2:non-optimized"},
		{"-o json port list", 0, `"state": "non-optimized"`},
		{"port ana-state p2 2 fast", 1, `state "fast"`},
		{"port ana-state p2 x optimized", 2, `GRPID "x"`},
		{"port del p2", 0, "port p2 deleted"},
		{"ctrl list", 0, "CNTLID"},
		{"ctrl disconnect 7", 1, "no controller 7"},
		{"config save " + saved, 0, "configuration saved to " + saved},
		{"config save --format json", 0, `"nqn": "` + nqn + `"`},
		{"rpc rpc.methods", 0, `"ctrl.disconnect"`},
		{"rpc port.list {bad", 2, "params:"},
		// Usage errors: status 2.
		{"ns resize " + nqn, 2, "missing NSID"},
		{"ns resize " + nqn + " x", 2, `NSID "x"`},
		{"ns bogus", 2, `ns: no command "bogus"`},
		{"bogus", 2, `no command "bogus"`},
		{"ns", 2, "give a command: list, add"},
		{"-o yaml port list", 2, `-o "yaml"`},
		{"port list extra", 2, `unexpected argument "extra"`},
		{"ns add " + nqn + " --nope", 2, "flag provided but not defined"},
		{"config save --format xml", 2, "--format"},
		{"--socket " + filepath.Join(dir, "none.sock") + " port list", 1, "is nvmetd running"},
	}
	for _, tt := range tests {
		t.Run(tt.args, func(t *testing.T) {
			args := append([]string{"nvmetctl", "--socket", sock}, strings.Fields(tt.args)...)
			var stdout, stderr bytes.Buffer
			status := run(args, &stdout, &stderr)
			got := stdout.String()
			if tt.status != 0 {
				got = stderr.String()
			}
			if status != tt.status || !strings.Contains(got, tt.out) {
				t.Errorf("status %d, want %d; output lacks %q:\nstdout:\n%s\nstderr:\n%s", status, tt.status, tt.out, stdout.String(), stderr.String())
			}
		})
	}
	// The saved file loads back as the running configuration.
	tree, err := configfs.LoadFile(saved)
	if err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	if run([]string{"nvmetctl", "--socket", sock, "-o", "json", "config", "save"}, &stdout, os.Stderr) != 0 {
		t.Fatal("config save failed")
	}
	var res control.SaveResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if string(tree.HCL()) != res.Config {
		t.Errorf("saved file differs from the running configuration:\n%s\nwant\n%s", tree.HCL(), res.Config)
	}
}

func TestInterspersed(t *testing.T) {
	app := newApp(nil, nil)
	for _, tt := range []struct{ in, want string }{
		{"ns add NQN --size 1G -p x", "ns add --size 1G -p x NQN"},
		{"ns list NQN -o json", "-o json ns list NQN"},
		{"-s /s ns resize NQN 1 2G --force", "-s /s ns resize --force NQN 1 2G"},
		{"ns add NQN --size=1G --grow x", "ns add --size=1G --grow NQN x"},
		{"port add p -- -x", "port add p -- -x"},
		{"bogus a --b", "bogus a --b"},
		{"--socket", "--socket"},
	} {
		got := strings.Join(interspersed(app, append([]string{"nvmetctl"}, strings.Fields(tt.in)...))[1:], " ")
		if got != tt.want {
			t.Errorf("%q: %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestHelpDefaults: no flag's help shows a default it does not have (the
// int flags said "(default: 0)" where the target uses 8192, 128, 1024...),
// and --backend names every backend.
func TestHelpDefaults(t *testing.T) {
	app := newApp(io.Discard, io.Discard)
	var walk func(path []string, cmds []*cli.Command)
	n := 0
	walk = func(path []string, cmds []*cli.Command) {
		for _, c := range cmds {
			p := append(append([]string(nil), path...), c.Name)
			if len(c.Subcommands) > 0 {
				walk(p, c.Subcommands)
				continue
			}
			var stdout bytes.Buffer
			if status := run(append(append([]string{"nvmetctl"}, p...), "--help"), &stdout, io.Discard); status != 0 {
				t.Errorf("%s --help: status %d", strings.Join(p, " "), status)
			}
			n++
			if strings.Contains(stdout.String(), "(default: 0)") {
				t.Errorf("%s --help shows a default of 0:\n%s", strings.Join(p, " "), stdout.String())
			}
			if c.Name == "add" && path[0] == "ns" && !strings.Contains(stdout.String(), "null or rbd") {
				t.Errorf("ns add --help: --backend leaves out rbd:\n%s", stdout.String())
			}
		}
	}
	walk(nil, app.Commands)
	if n < 29 {
		t.Errorf("walked %d commands' help, want all 29", n)
	}
}

// TestCompletion: urfave's bash completion lists the commands.
func TestCompletion(t *testing.T) {
	args := []string{"nvmetctl", "ns", "--generate-bash-completion"}
	saved := os.Args
	os.Args = args // urfave/cli's completion reads os.Args
	defer func() { os.Args = saved }()
	var stdout bytes.Buffer
	if status := run(args, &stdout, os.Stderr); status != 0 {
		t.Fatalf("status %d", status)
	}
	for _, w := range []string{"add", "resize", "disable"} {
		if !strings.Contains(stdout.String(), w+"\n") {
			t.Errorf("completion lacks %q:\n%s", w, stdout.String())
		}
	}
}
