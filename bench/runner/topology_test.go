package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/bench/report"
)

func TestParseTopologies(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
		err  bool
	}{
		{"loopback", []string{"loopback"}, false},
		{"veth4,veth6", []string{"veth4", "veth6"}, false},
		{" veth6 , loopback ,", []string{"veth6", "loopback"}, false},
		{"veth4,veth4", []string{"veth4"}, false},
		{"all", AllTopologies, false},
		{"veth6,all", []string{"veth6", "loopback", "veth4"}, false},
		{"", nil, true},
		{",", nil, true},
		{"veth5", nil, true},
		{"loopback,Veth4", nil, true},
	} {
		got, err := ParseTopologies(c.in)
		if (err != nil) != c.err || !slices.Equal(got, c.want) {
			t.Errorf("ParseTopologies(%q) = %q, %v; want %q, error %v", c.in, got, err, c.want, c.err)
		}
	}
}

func TestDefaultTopologies(t *testing.T) {
	if got := DefaultTopologies(ModeFull); !slices.Equal(got, []string{"loopback", "veth4", "veth6"}) {
		t.Errorf("full: %q", got)
	}
	for _, m := range []string{ModeQuick, ModeSmoke} {
		if got := DefaultTopologies(m); !slices.Equal(got, []string{"loopback"}) {
			t.Errorf("%s: %q", m, got)
		}
	}
	// The default is a copy: changing it leaves AllTopologies alone.
	DefaultTopologies(ModeFull)[0] = "x"
	if AllTopologies[0] != TopologyLoopback {
		t.Errorf("AllTopologies changed: %q", AllTopologies)
	}
}

// TestRunRejectsTopology: an unknown topology in a Config fails the run
// before anything starts.
func TestRunRejectsTopology(t *testing.T) {
	if err := CheckTools("", "", true); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.fio"), []byte("[a]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Run(context.Background(), Config{Mode: ModeSmoke, JobsDir: dir, SkipNbdkit: true, SkipCeilings: true,
		Topologies: []string{"veth5"}, WorkDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), `topology "veth5"`) {
		t.Errorf("Run with topology veth5: %v", err)
	}
}

func TestVethAddrs(t *testing.T) {
	if s, c := vethAddrs(TopologyVeth4); s != "192.0.2.1" || c != "192.0.2.2" {
		t.Errorf("veth4: %s %s", s, c)
	}
	if s, c := vethAddrs(TopologyVeth6); s != "2001:db8::1" || c != "2001:db8::2" {
		t.Errorf("veth6: %s %s", s, c)
	}
	if d := vethDescription(TopologyVeth6); !strings.Contains(d, "2001:db8::1") || !strings.Contains(d, "udp6 mode") ||
		!strings.Contains(d, "MTU 9000") {
		t.Errorf("veth6 description %q", d)
	}
	if d := vethDescription(TopologyVeth4); !strings.Contains(d, "192.0.2.2") || !strings.Contains(d, "raw mode") {
		t.Errorf("veth4 description %q", d)
	}
}

func TestVethIfNames(t *testing.T) {
	s, c := vethIfNames(4194304) // the largest PID Linux allows
	if s == c || len(s) > unix.IFNAMSIZ-1 || len(c) > unix.IFNAMSIZ-1 || !strings.Contains(s, "4194304") {
		t.Errorf("veth names %q %q", s, c)
	}
}

// TestVethCommands: every command runs inside one of the two namespaces
// (never the runner's), the pair is made in the server's with its peer
// straight in the client's, and each end gets its addresses (IPv6 without
// DAD) and goes up, MTU 9000.
func TestVethCommands(t *testing.T) {
	cmds := vethCommands(100, 200, "nvb1s", "nvb1c")
	inServer, inClient := nsenterPrefix(100), nsenterPrefix(200)
	var server, client []string
	for _, argv := range cmds {
		switch {
		case slices.Equal(argv[:len(inServer)], inServer):
			server = append(server, strings.Join(argv[len(inServer):], " "))
		case slices.Equal(argv[:len(inClient)], inClient):
			client = append(client, strings.Join(argv[len(inClient):], " "))
		default:
			t.Fatalf("command outside the namespaces: %q", argv)
		}
	}
	if want := "ip link add nvb1s mtu 9000 type veth peer name nvb1c mtu 9000 netns 200"; server[0] != want {
		t.Errorf("first command %q, want %q", server[0], want)
	}
	for _, want := range []string{"ip addr add 192.0.2.1/24 dev nvb1s", "ip addr add 2001:db8::1/64 dev nvb1s nodad",
		"ip link set nvb1s up", "ip link set lo up"} {
		if !slices.Contains(server, want) {
			t.Errorf("server namespace: no %q in %q", want, server)
		}
	}
	for _, want := range []string{"ip addr add 192.0.2.2/24 dev nvb1c", "ip addr add 2001:db8::2/64 dev nvb1c nodad",
		"ip link set nvb1c up", "ip link set lo up"} {
		if !slices.Contains(client, want) {
			t.Errorf("client namespace: no %q in %q", want, client)
		}
	}
	// Addresses go on before the links go up (no window with a
	// half-configured link up).
	if i, j := slices.Index(client, "ip addr add 2001:db8::2/64 dev nvb1c nodad"), slices.Index(client, "ip link set nvb1c up"); i > j {
		t.Errorf("client link up before its address: %q", client)
	}
}

func TestParseSNMP6UDP(t *testing.T) {
	text := "Ip6InReceives                   \t12\nUdp6InDatagrams                 \t7\nUdp6NoPorts                     \t1\n" +
		"Udp6OutDatagrams                \t9\nUdpLite6InDatagrams             \t3\n"
	in, out, err := parseSNMP6UDP(text)
	if err != nil || in != 7 || out != 9 {
		t.Errorf("parseSNMP6UDP = %v, %v, %v; want 7, 9", in, out, err)
	}
	if _, _, err := parseSNMP6UDP("Ip6InReceives 1\n"); err == nil {
		t.Error("no Udp6 counters: no error")
	}
	if _, _, err := parseSNMP6UDP("Udp6InDatagrams x\nUdp6OutDatagrams 1\n"); err == nil {
		t.Error("bad value: no error")
	}
}

// TestUDPCountsSelf reads the test's own namespace's counters, IPv6 too
// where the kernel has it.
func TestUDPCountsSelf(t *testing.T) {
	in, out, err := udpCounts(nil, false)
	if err != nil || in < 0 || out < 0 {
		t.Fatalf("udpCounts: %v %v %v", in, out, err)
	}
	if _, err := os.Stat("/proc/net/snmp6"); err != nil {
		t.Skip("no IPv6 counters here")
	}
	in6, out6, err := udpCounts([]int{os.Getpid()}, true)
	if err != nil || in6 < in || out6 < out {
		t.Errorf("udpCounts with IPv6: %v %v %v (IPv4 alone %v %v)", in6, out6, err, in, out)
	}
}

// TestTopologyJobs: a row pair per job and topology, job by job, and each
// side labelled with its topology when there are several.
func TestTopologyJobs(t *testing.T) {
	jobs := []JobFile{{Name: "a", Path: "x/a.fio"}, {Name: "b", Path: "x/b.fio"}}
	got := topologyJobs(jobs, []string{"loopback", "veth6"})
	var names []string
	for _, j := range got {
		names = append(names, j.Name+"/"+j.Topology)
	}
	if want := []string{"a/loopback", "a/veth6", "b/loopback", "b/veth6"}; !slices.Equal(names, want) || got[3].File != "x/b.fio" {
		t.Errorf("jobs %q, want %q", names, want)
	}
	sides := []*side{{name: report.SideNbdkit, topology: "veth4"}, {name: report.SideNvmeof, topology: "veth4"}}
	labelSides(sides, true)
	if sides[0].label != "nbdkit@veth4" || sides[1].label != "nvmeof@veth4" {
		t.Errorf("labels %q %q", sides[0].label, sides[1].label)
	}
	labelSides(sides, false)
	if sides[1].label != "nvmeof" {
		t.Errorf("label with one topology %q", sides[1].label)
	}
}

// listenInNetns listens on TCP addr in the network namespace of pid (the
// socket stays there once made) and accepts connections until closed.
func listenInNetns(t *testing.T, pid int, addr string) net.Listener {
	t.Helper()
	var l net.Listener
	err := inNetns(pid, func() (err error) {
		l, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		t.Fatalf("listen on %s in pid %d's namespace: %v", addr, pid, err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l
}

// TestInNetnsKeepsThreads: a server started before many namespace
// switches outlives them (the threads are not ended, so its Pdeathsig
// does not fire), and the switches leave the test's namespace as it was.
func TestInNetnsKeepsThreads(t *testing.T) {
	if why := vethTools(); why != "" {
		t.Skip(why)
	}
	holder, err := startServer("holder", nsHolderArgv, filepath.Join(t.TempDir(), "holder.log"),
		serverWrap{Prefix: []string{"unshare", "--net", "--"}})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Stop()
	other, err := startServer("other", nsHolderArgv, filepath.Join(t.TempDir(), "other.log"), serverWrap{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Stop()
	_, self, err := netnsOf(0)
	if err != nil {
		t.Fatal(err)
	}
	for range 4 * runtime.GOMAXPROCS(0) {
		var ino uint64
		err := inNetns(holder.PID, func() error {
			var st unix.Stat_t
			err := unix.Stat("/proc/thread-self/ns/net", &st)
			ino = st.Ino
			return err
		})
		if err != nil || ino == self {
			t.Fatalf("inNetns: %v, namespace inode %d (own %d)", err, ino, self)
		}
	}
	if _, now, err := netnsOf(0); err != nil || now != self {
		t.Errorf("own namespace %d after, %d before (%v)", now, self, err)
	}
	if other.exited() || holder.exited() {
		t.Errorf("servers ended by the namespace switches: %v %v", other.err, holder.err)
	}
}

// TestVethLink (root): the two namespaces and the veth pair come up with
// their addresses, a client in one reaches a server in the other over IPv4
// and IPv6, nothing appears in the test's own namespace, and close removes
// it all, holders included.
func TestVethLink(t *testing.T) {
	if why := vethTools(); why != "" {
		t.Skip(why)
	}
	c := Config{WorkDir: t.TempDir(), Log: io.Discard}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := c.newVethLink(ctx)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			l.close(c)
		}
	}()
	if _, err := net.InterfaceByName(l.serverIf); err == nil {
		t.Errorf("veth end %s in the test's own namespace", l.serverIf)
	}
	for _, srv := range []string{VethServer4, VethServer6} {
		ln := listenInNetns(t, l.server.PID, net.JoinHostPort(srv, "0"))
		addr := ln.Addr().String()
		if err := dialInNetns(l.client.PID, addr, 5*time.Second); err != nil {
			t.Errorf("dial %s from the client namespace: %v", addr, err)
		}
		ln.Close()
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/dev", l.client.PID))
	if err != nil || !strings.Contains(string(b), l.clientIf+":") {
		t.Errorf("client namespace's interfaces (%v):\n%s", err, b)
	}
	if _, _, err := udpCounts([]int{l.server.PID, l.client.PID}, true); err != nil {
		t.Errorf("udp counters of the namespaces: %v", err)
	}
	pids := []int{l.server.PID, l.client.PID}
	l.close(c)
	closed = true
	for _, pid := range pids {
		if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
			t.Errorf("holder pid %d after close: %v", pid, err)
		}
	}
	if !l.server.exited() || !l.client.exited() {
		t.Error("holders not waited for")
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pids[0])); err == nil {
		t.Errorf("pid %d still exists", pids[0])
	}
}
