//go:build linux

// Package netnstest gives tests two network namespaces joined by a veth
// pair, as two machines on one link: 192.0.2.1/24 and 2001:db8::1/64 in
// the first, 192.0.2.2/24 and 2001:db8::2/64 in the second (documentation
// prefixes, reachable only between the two), MTU 9000 unless asked
// otherwise. Code runs inside a namespace on a locked OS thread (Do):
// sockets it opens stay in that namespace whatever thread uses them
// later. It needs root and iproute2's ip.
package netnstest

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Addresses of the two ends.
var (
	AddrA  = netip.MustParseAddr("192.0.2.1")
	AddrB  = netip.MustParseAddr("192.0.2.2")
	Addr6A = netip.MustParseAddr("2001:db8::1")
	Addr6B = netip.MustParseAddr("2001:db8::2")
)

// Pair is two network namespaces joined by a veth pair.
type Pair struct {
	// A and B name the namespaces (ip netns).
	A, B string
}

var seq atomic.Uint32

// New creates a pair whose link has the given MTU (0: 9000) and removes
// it when the test ends. It skips the test without root or ip.
func New(t testing.TB, mtu int) *Pair {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("ip (iproute2) is not installed")
	}
	if mtu == 0 {
		mtu = 9000
	}
	n := seq.Add(1)
	p := &Pair{A: fmt.Sprintf("nvt%d-%d-a", os.Getpid(), n), B: fmt.Sprintf("nvt%d-%d-b", os.Getpid(), n)}
	veth := fmt.Sprintf("nv%d%d", os.Getpid()%100000, n)
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "del", p.A).Run()
		_ = exec.Command("ip", "netns", "del", p.B).Run()
	})
	cmds := [][]string{
		{"netns", "add", p.A},
		{"netns", "add", p.B},
		{"link", "add", veth + "a", "mtu", fmt.Sprint(mtu), "netns", p.A, "type", "veth", "peer", "name", veth + "b", "mtu", fmt.Sprint(mtu), "netns", p.B},
		{"-n", p.A, "addr", "add", AddrA.String() + "/24", "dev", veth + "a"},
		{"-n", p.B, "addr", "add", AddrB.String() + "/24", "dev", veth + "b"},
		{"-n", p.A, "addr", "add", Addr6A.String() + "/64", "dev", veth + "a", "nodad"},
		{"-n", p.B, "addr", "add", Addr6B.String() + "/64", "dev", veth + "b", "nodad"},
		{"-n", p.A, "link", "set", "lo", "up"},
		{"-n", p.B, "link", "set", "lo", "up"},
		{"-n", p.A, "link", "set", veth + "a", "up"},
		{"-n", p.B, "link", "set", veth + "b", "up"},
	}
	for _, c := range cmds {
		if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(c, " "), err, bytes.TrimSpace(out))
		}
	}
	// The kernel reports carrier on the veth ends a while after they are
	// set up (linkwatch runs at most once a second); IPv6 routes nothing
	// through a link without carrier until then.
	deadline := time.Now().Add(10 * time.Second)
	for _, end := range [][2]string{{p.A, veth + "a"}, {p.B, veth + "b"}} {
		for {
			out, err := exec.Command("ip", "-n", end[0], "-o", "link", "show", "dev", end[1]).CombinedOutput()
			if err == nil && bytes.Contains(out, []byte("state UP")) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s in %s not up after 10 s: %s", end[1], end[0], bytes.TrimSpace(out))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return p
}

// Do runs f on an OS thread inside namespace ns (A or B) and returns
// its error. The thread is discarded afterwards rather than returned to
// the runtime in another namespace.
func Do(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: the goroutine ends with the thread locked,
		// so the runtime ends the thread instead of reusing it.
		fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("netnstest: namespace %s: %w", ns, err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("netnstest: entering %s: %w", ns, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// Run runs a command inside namespace ns (ip netns exec) and returns its
// combined output.
func Run(ns string, name string, args ...string) ([]byte, error) {
	return exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...).CombinedOutput()
}
