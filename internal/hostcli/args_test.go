package hostcli

import (
	"encoding/json"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/nvmeof/nvmeof/fabrics"
	nvmetcp "github.com/nvmeof/nvmeof/fabrics/tcp"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/initiator/blockdev"
	"github.com/nvmeof/nvmeof/rdma/ibverbs"
)

// parseConnect runs the connect command's flag parsing on args and
// returns the parsed arguments.
func parseConnect(t *testing.T, args ...string) (connectArgs, error) {
	t.Helper()
	var got connectArgs
	app := &cli.App{
		Writer: io.Discard, ErrWriter: io.Discard,
		Commands: []*cli.Command{{
			Name:   "connect",
			Flags:  append(fabricsFlags(true), &cli.StringFlag{Name: "map", Value: "auto"}),
			Action: func(c *cli.Context) error { got = parseFabricsArgs(c); return nil },
		}},
	}
	err := app.Run(reorderArgs(app, append([]string{"nvmeof", "connect"}, args...)))
	return got, err
}

const (
	tNQN  = "nqn.2026-11.io.nvmeof:disk0"
	tHost = "nqn.2014-08.org.nvmexpress:uuid:5a3c1b2e-0b7a-4c1e-9d8f-0123456789ab"
)

func TestConnectFlagsToOptions(t *testing.T) {
	hostID, _ := fabrics.ParseUUID("5a3c1b2e-0b7a-4c1e-9d8f-0123456789ab")
	rdma := func(a string, port uint16) fabrics.Address {
		return fabrics.Address{Transport: "rdma", Addr: netip.MustParseAddr(a), ServiceID: port}
	}
	tests := []struct {
		name    string
		args    []string
		want    initiator.Options
		addr    fabrics.Address
		method  blockdev.Method
		none    bool
		wantErr string // substring of the error of validateConnect
		// needIBVerbs and noIBVerbs run the case only in binaries with
		// and without the ibverbs provider.
		needIBVerbs, noIBVerbs bool
	}{
		{
			name: "defaults",
			args: []string{"-t", "rdma", "-a", "192.0.2.1", "-n", tNQN},
			want: initiator.Options{SubsystemNQN: tNQN, CtrlLossTimeout: 600 * time.Second},
			addr: rdma("192.0.2.1", 4420),
		},
		{
			name: "every short flag",
			args: []string{"-t", "rdma", "-a", "192.0.2.1", "-s", "4421", "-n", tNQN, "-q", tHost,
				"-I", "5A3C1B2E-0B7A-4C1E-9D8F-0123456789AB", "-i", "4", "-Q", "64", "-k", "15", "-c", "2", "-l", "30"},
			want: initiator.Options{SubsystemNQN: tNQN, HostNQN: tHost, HostID: hostID, NrIOQueues: 4, QueueSize: 64,
				KeepAliveTimeout: 15 * time.Second, ReconnectDelay: 2 * time.Second, CtrlLossTimeout: 30 * time.Second},
			addr: rdma("192.0.2.1", 4421),
		},
		{
			name: "long flags with =",
			args: []string{"--transport=rdma", "--traddr=10.0.0.7", "--trsvcid=4420", "--nqn=" + tNQN,
				"--nr-io-queues=2", "--queue-size=1024", "--keep-alive-tmo=5", "--reconnect-delay=1", "--ctrl-loss-tmo=5", "--map=fuse"},
			want: initiator.Options{SubsystemNQN: tNQN, NrIOQueues: 2, QueueSize: 1024,
				KeepAliveTimeout: 5 * time.Second, ReconnectDelay: time.Second, CtrlLossTimeout: 5 * time.Second},
			addr:   rdma("10.0.0.7", 4420),
			method: blockdev.MethodFUSELoop,
		},
		{
			name: "tcp with nvme-cli's flags",
			args: []string{"-t", "tcp", "-a", "192.0.2.1", "-n", tNQN, "-g", "--data-digest", "-i", "2", "-Q", "64", "-T", "32"},
			want: initiator.Options{SubsystemNQN: tNQN, NrIOQueues: 2, QueueSize: 64, CtrlLossTimeout: 600 * time.Second},
			addr: fabrics.Address{Transport: "tcp", Addr: netip.MustParseAddr("192.0.2.1"), ServiceID: 4420},
		},
		{
			name: "ctrl-loss-tmo -1 reconnects forever",
			args: []string{"-a", "192.0.2.1", "-n", tNQN, "-l", "-1", "--map", "nbd"},
			want: initiator.Options{SubsystemNQN: tNQN, CtrlLossTimeout: -1},
			addr: rdma("192.0.2.1", 4420), method: blockdev.MethodNBD,
		},
		{
			name: "map ublk",
			args: []string{"-a", "192.0.2.1", "-n", tNQN, "--map", "ublk"},
			want: initiator.Options{SubsystemNQN: tNQN, CtrlLossTimeout: 600 * time.Second},
			addr: rdma("192.0.2.1", 4420), method: blockdev.MethodUblk,
		},
		{
			name: "ctrl-loss-tmo 0 gives up at once",
			args: []string{"-a", "192.0.2.1", "-n", tNQN, "-l", "0", "--map", "none"},
			want: initiator.Options{SubsystemNQN: tNQN, CtrlLossTimeout: time.Nanosecond},
			addr: rdma("192.0.2.1", 4420), none: true,
		},
		{
			name: "zeros keep the defaults",
			args: []string{"-a", "192.0.2.1", "-n", tNQN, "-i", "0", "-Q", "0", "-k", "0", "-c", "0"},
			want: initiator.Options{SubsystemNQN: tNQN, CtrlLossTimeout: 600 * time.Second},
			addr: rdma("192.0.2.1", 4420),
		},
		{
			name: "loop with a target config",
			args: []string{"-t", "loop", "-a", "127.0.0.1", "-n", tNQN, "--target-config", "/dev/null"},
			want: initiator.Options{SubsystemNQN: tNQN, CtrlLossTimeout: 600 * time.Second},
			addr: fabrics.Address{Transport: "loop", Addr: netip.MustParseAddr("127.0.0.1"), ServiceID: 4420},
		},
		{name: "no nqn", args: []string{"-a", "192.0.2.1"}, wantErr: "--nqn (-n) not specified"},
		{name: "no address", args: []string{"-n", tNQN}, wantErr: "--traddr (-a) not specified"},
		{name: "bad address", args: []string{"-a", "target.example", "-n", tNQN}, wantErr: "not an IP address"},
		{
			name: "ipv6",
			args: []string{"-a", "2001:db8::1", "-n", tNQN, "-w", "2001:db8::2"},
			want: initiator.Options{SubsystemNQN: tNQN, CtrlLossTimeout: 600 * time.Second},
			addr: rdma("2001:db8::1", 4420),
		},
		{
			name: "provider and device",
			args: []string{"-a", "192.0.2.1", "-n", tNQN, "--provider", "auto", "--device", "rxe0"},
			want: initiator.Options{SubsystemNQN: tNQN, CtrlLossTimeout: 600 * time.Second},
			addr: rdma("192.0.2.1", 4420), needIBVerbs: true,
		},
		{
			name: "provider soft",
			args: []string{"-a", "192.0.2.1", "-n", tNQN, "--provider", "soft"},
			want: initiator.Options{SubsystemNQN: tNQN, CtrlLossTimeout: 600 * time.Second},
			addr: rdma("192.0.2.1", 4420),
		},
		{name: "zone", args: []string{"-a", "fe80::1%eth0", "-n", tNQN}, wantErr: "zones are not allowed"},
		{name: "unknown provider", args: []string{"-a", "192.0.2.1", "-n", tNQN, "--provider", "hw"}, wantErr: `--provider hw: unknown RDMA provider "hw" (want auto, soft or ibverbs)`},
		{name: "device with soft", args: []string{"-a", "192.0.2.1", "-n", tNQN, "--provider", "soft", "--device", "mlx5_0"}, wantErr: "--device mlx5_0: a device needs --provider ibverbs or auto, not soft"},
		{name: "ibverbs not built in", args: []string{"-a", "192.0.2.1", "-n", tNQN, "--provider", "ibverbs"}, wantErr: "--provider ibverbs: the ibverbs RDMA provider is not built into this binary (rebuild with CGO_ENABLED=1 go build -tags ibverbs", noIBVerbs: true},
		{name: "device without ibverbs", args: []string{"-a", "192.0.2.1", "-n", tNQN, "--device", "rxe0"}, wantErr: `--device rxe0: device "rxe0" needs the ibverbs provider`, noIBVerbs: true},
		{name: "fc", args: []string{"-t", "fc", "-a", "192.0.2.1", "-n", tNQN}, wantErr: "transport fc is not supported (rdma, tcp or loop)"},
		{name: "digest on rdma", args: []string{"-a", "192.0.2.1", "-n", tNQN, "--hdr-digest"}, wantErr: "--hdr-digest and --data-digest are for transport tcp, not rdma"},
		{name: "unknown transport", args: []string{"-t", "fibre", "-a", "192.0.2.1", "-n", tNQN}, wantErr: "unknown transport"},
		{name: "service 0", args: []string{"-a", "192.0.2.1", "-s", "0", "-n", tNQN}, wantErr: "not a port number"},
		{name: "service too big", args: []string{"-a", "192.0.2.1", "-s", "70000", "-n", tNQN}, wantErr: "not a port number"},
		{
			// nvmetcli's example names: Linux nvmet and nvme-cli take them.
			name: "non-conforming nqns",
			args: []string{"-a", "192.0.2.1", "-n", "testnqn", "-q", "hostnqn"},
			want: initiator.Options{SubsystemNQN: "testnqn", HostNQN: "hostnqn", CtrlLossTimeout: 600 * time.Second},
			addr: rdma("192.0.2.1", 4420),
		},
		{name: "bad nqn", args: []string{"-a", "192.0.2.1", "-n", "disk 0"}, wantErr: `nqn "disk 0"`},
		{name: "bad uuid nqn", args: []string{"-a", "192.0.2.1", "-n", "nqn.2014-08.org.nvmexpress:uuid:nope"}, wantErr: "nqn"},
		{name: "bad host nqn", args: []string{"-a", "192.0.2.1", "-n", tNQN, "-q", "host one"}, wantErr: "hostnqn"},
		{name: "bad host id", args: []string{"-a", "192.0.2.1", "-n", tNQN, "-I", "1234"}, wantErr: "not a UUID"},
		{name: "queue size too small", args: []string{"-a", "192.0.2.1", "-n", tNQN, "-Q", "8"}, wantErr: "queue-size 8 out of range 16..1024"},
		{name: "queue size too big", args: []string{"-a", "192.0.2.1", "-n", tNQN, "-Q", "2048"}, wantErr: "out of range"},
		{name: "negative queues", args: []string{"-a", "192.0.2.1", "-n", tNQN, "-i", "-1"}, wantErr: "nr-io-queues -1"},
		{name: "negative kato", args: []string{"-a", "192.0.2.1", "-n", tNQN, "-k", "-1"}, wantErr: "keep-alive-tmo -1"},
		{name: "negative delay", args: []string{"-a", "192.0.2.1", "-n", tNQN, "-c", "-5"}, wantErr: "reconnect-delay -5"},
		{name: "loop without config", args: []string{"-t", "loop", "-a", "127.0.0.1", "-n", tNQN}, wantErr: "--target-config"},
		{name: "bad map", args: []string{"-a", "192.0.2.1", "-n", tNQN, "--map", "loop"}, wantErr: "--map"},
		{name: "bad host address", args: []string{"-a", "192.0.2.1", "-n", tNQN, "-w", "eth0"}, wantErr: "host-traddr"},
		{name: "zero timeout", args: []string{"-a", "192.0.2.1", "-n", tNQN, "--timeout", "0s"}, wantErr: "--timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.needIBVerbs && !ibverbs.Built || tc.noIBVerbs && ibverbs.Built {
				t.Skipf("ibverbs built in: %t", ibverbs.Built)
			}
			a, err := parseConnect(t, tc.args...)
			if err != nil {
				t.Fatalf("flag parsing: %v", err)
			}
			// The connection daemon gets the arguments as JSON.
			var back connectArgs
			if b, err := json.Marshal(a); err != nil || json.Unmarshal(b, &back) != nil || back != a {
				t.Fatalf("JSON round trip: %+v -> %+v (%v)", a, back, err)
			}
			err = a.validateConnect()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("validateConnect() = %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("validateConnect: %v", err)
			}
			o, err := a.options()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(o, tc.want) {
				t.Errorf("options:\n got %+v\nwant %+v", o, tc.want)
			}
			addr, err := a.address()
			if err != nil || addr != tc.addr {
				t.Errorf("address() = %v, %v; want %v", addr, err, tc.addr)
			}
			m, none, err := a.mapMethod()
			if err != nil || m != tc.method || none != tc.none {
				t.Errorf("mapMethod() = %v, %v, %v; want %v, %v", m, none, err, tc.method, tc.none)
			}
		})
	}
}

// TestTCPFlags: -g/--hdr-digest, -G/--data-digest, --host-traddr and
// --tos reach the NVMe/TCP dialer's configuration.
func TestTCPFlags(t *testing.T) {
	tests := []struct {
		args         []string
		hdgst, ddgst bool
		err          string
	}{
		{args: []string{"-t", "tcp", "-a", "192.0.2.1", "-n", tNQN}},
		{args: []string{"-t", "tcp", "-a", "192.0.2.1", "-n", tNQN, "-g"}, hdgst: true},
		{args: []string{"-t", "tcp", "-a", "192.0.2.1", "-n", tNQN, "-G", "-w", "192.0.2.9"}, ddgst: true},
		{args: []string{"-t", "tcp", "-a", "192.0.2.1", "-n", tNQN, "--hdr-digest", "--data-digest", "--tos", "40"}, hdgst: true, ddgst: true},
		{args: []string{"-t", "tcp", "-a", "192.0.2.1", "-n", tNQN, "-w", "2001:db8::1"}, err: "not of one address family"},
		{args: []string{"-t", "tcp", "-a", "192.0.2.1", "-n", tNQN, "-w", "host"}, err: "host-traddr"},
		{args: []string{"-t", "tcp", "-a", "192.0.2.1", "-n", tNQN, "--tos", "256"}, err: "tos 256"},
	}
	for _, tc := range tests {
		a, err := parseConnect(t, tc.args...)
		if err != nil {
			t.Fatalf("%v: flag parsing: %v", tc.args, err)
		}
		tr, err := openTransport(a, hclog.NewNullLogger())
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: %v, want an error with %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		d, ok := tr.dialer.(*nvmetcp.Dialer)
		if !ok {
			t.Fatalf("%v: dialer %T", tc.args, tr.dialer)
		}
		if d.Config.HeaderDigest != tc.hdgst || d.Config.DataDigest != tc.ddgst || d.Config.SetTOS != (a.TOS >= 0) ||
			(a.HostTraddr != "") != d.Config.LocalAddr.IsValid() {
			t.Errorf("%v: config %+v", tc.args, d.Config)
		}
		tr.close()
	}
}

func TestReorderArgs(t *testing.T) {
	app := newApp(io.Discard, io.Discard)
	tests := []struct{ in, want []string }{
		{[]string{"nvmeof", "id-ctrl", "nvmeof0", "-o", "json"}, []string{"nvmeof", "id-ctrl", "-o", "json", "--", "nvmeof0"}},
		{[]string{"nvmeof", "--run-dir", "/x", "id-ns", "/dev/loop3", "-n", "2"}, []string{"nvmeof", "--run-dir", "/x", "id-ns", "-n", "2", "--", "/dev/loop3"}},
		{[]string{"nvmeof", "connect", "-a", "1.2.3.4", "-l", "-1"}, []string{"nvmeof", "connect", "-a", "1.2.3.4", "-l", "-1"}},
		{[]string{"nvmeof", "list", "--output-format=json"}, []string{"nvmeof", "list", "--output-format=json"}},
		{[]string{"nvmeof", "smart-log", "-h", "nvmeof1"}, []string{"nvmeof", "smart-log", "-h", "--", "nvmeof1"}},
		{[]string{"nvmeof", "bogus", "x", "-o"}, []string{"nvmeof", "bogus", "x", "-o"}},
	}
	for _, tc := range tests {
		if got := reorderArgs(app, tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("reorderArgs(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestHostAddrs(t *testing.T) {
	got, err := hostAddrs(netip.MustParseAddr("127.0.0.1"), "")
	if err != nil || len(got) != loopbackHostCandidates || got[0] != netip.MustParseAddr("127.0.0.2") {
		t.Fatalf("loopback target: %v, %v", got, err)
	}
	got, err = hostAddrs(netip.MustParseAddr("127.0.0.2"), "")
	if err != nil || got[0] != netip.MustParseAddr("127.0.0.3") {
		t.Fatalf("target on 127.0.0.2: %v, %v (the target's own address must be skipped)", got, err)
	}
	got, err = hostAddrs(netip.MustParseAddr("127.0.0.1"), "127.0.0.9")
	if err != nil || len(got) != 1 || got[0] != netip.MustParseAddr("127.0.0.9") {
		t.Fatalf("explicit -w: %v, %v", got, err)
	}
	if got, err := hostAddrs(netip.MustParseAddr("::1"), "::1"); err != nil || len(got) != 1 || got[0] != netip.IPv6Loopback() {
		t.Fatalf("IPv6 -w: %v, %v", got, err)
	}
	if _, err := hostAddrs(netip.MustParseAddr("127.0.0.1"), "fe80::1%lo"); err == nil {
		t.Fatal("-w with a zone accepted")
	}
	// All of 127/8 is loopback.
	got, err = hostAddrs(netip.MustParseAddr("127.1.2.3"), "")
	if err != nil || got[0] != netip.MustParseAddr("127.0.0.2") {
		t.Fatalf("127.x target: %v, %v", got, err)
	}
}

// tempHostNQNFiles points the default host NQN's sources (the host NQN
// file, the DMI product UUID, machine-id) into a new directory, none of
// them there yet, for the test's duration, and returns the directory.
func tempHostNQNFiles(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	saved := []string{initiator.HostNQNFile, dmiUUIDFile, machineIDFile}
	t.Cleanup(func() { initiator.HostNQNFile, dmiUUIDFile, machineIDFile = saved[0], saved[1], saved[2] })
	initiator.HostNQNFile = filepath.Join(dir, "hostnqn")
	dmiUUIDFile = filepath.Join(dir, "product_uuid")
	machineIDFile = filepath.Join(dir, "machine-id")
	return dir
}

func TestDefaultHostNQN(t *testing.T) {
	dir := tempHostNQNFiles(t)
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := defaultHostNQN(); got != "" {
		t.Errorf("no sources: %q, want empty", got)
	}
	write("machine-id", "0123456789abcdef0123456789abcdef\n")
	if got, want := defaultHostNQN(), fabrics.UUIDNQNPrefix+"01234567-89ab-4def-8123-456789abcdef"; got != want {
		t.Errorf("machine-id: %q, want %q", got, want)
	}
	write("product_uuid", "4C4C4544-0042-3610-8052-B4C04F4D4E32\n")
	if got, want := defaultHostNQN(), fabrics.UUIDNQNPrefix+"4c4c4544-0042-3610-8052-b4c04f4d4e32"; got != want {
		t.Errorf("DMI: %q, want %q", got, want)
	}
	write("hostnqn", tHost+"\n")
	if got := defaultHostNQN(); got != tHost {
		t.Errorf("hostnqn file: %q, want %q", got, tHost)
	}
}
