// Command kpeer-auth is the host side of the DH-HMAC-CHAP interop test
// (tests/interop TestAuthInitiatorKernelTarget): our initiator, over the
// soft RoCE provider, authenticates to the Linux kernel's nvmet-rdma target
// in a kernel-peer guest (guest/auth-target.sh), whose keys nvme-cli
// generated. It prints PASS:/FAIL: lines and "RESULT: PASS|FAIL".
//
// Cases: host 1 with its key (null DH group), verified I/O at 0; host 2
// with its key and the controller key (ffdhe2048, bidirectional, two I/O
// queues), verified I/O at 1 MiB; then refused: host 1 without a key, host
// 1 with a wrong key, host 2 with a wrong controller key.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/fabrics"
	nvmerdma "github.com/nvmeof/nvmeof/fabrics/rdma"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/nvme/auth"
	"github.com/nvmeof/nvmeof/rdma/provider"
)

type run struct {
	addr        fabrics.Address
	dialer      fabrics.Dialer
	nqn         string
	log         hclog.Logger
	nfail       int
	boundRefuse time.Duration
}

func (r *run) pass(format string, a ...any) { fmt.Printf("PASS: "+format+"\n", a...) }
func (r *run) fail(format string, a ...any) {
	r.nfail++
	fmt.Printf("FAIL: "+format+"\n", a...)
}
func (r *run) step(s string) { fmt.Printf("\n=== %s [%s]\n", s, time.Now().Format("15:04:05.000")) }

func main() {
	traddr := flag.String("traddr", "192.0.2.2", "target address")
	hostAddr := flag.String("host-addr", "192.0.2.1", "local address of the soft RoCE device")
	nqn := flag.String("nqn", "", "subsystem NQN")
	host1 := flag.String("host1", "", "host 1 NQN (key, null group)")
	host2 := flag.String("host2", "", "host 2 NQN (key and controller key, ffdhe2048)")
	keys := flag.String("keys", "", "keys.env the guest wrote (HOST1_KEY, HOST2_KEY, HOST2_CTRL_KEY)")
	refuse := flag.Duration("refuse-bound", 60*time.Second, "bound on each refused connect")
	flag.Parse()
	r := &run{nqn: *nqn, boundRefuse: *refuse,
		log: hclog.New(&hclog.LoggerOptions{Name: "kpeer-auth", Level: hclog.Info, Output: os.Stdout})}
	k, err := readEnv(*keys)
	if err != nil {
		r.fail("keys: %v", err)
		os.Exit(1)
	}
	ta, err := netip.ParseAddr(*traddr)
	if err != nil {
		r.fail("-traddr: %v", err)
		os.Exit(1)
	}
	ha, err := netip.ParseAddr(*hostAddr)
	if err != nil {
		r.fail("-host-addr: %v", err)
		os.Exit(1)
	}
	r.addr = fabrics.Address{Transport: "rdma", Addr: ta, ServiceID: 4420}
	dev, err := provider.Open(provider.Config{Provider: "soft", Addr: ha, Logger: r.log.Named("soft")})
	if err != nil {
		r.fail("open device: %v", err)
		os.Exit(1)
	}
	defer dev.Close()
	r.dialer = nvmerdma.NewDialer(nvmerdma.HostConfig{Device: dev, Logger: r.log.Named("rdma")})

	wrongKey, _ := auth.GenerateKey(auth.HashSHA256, 32, *host1, nil)
	wrongCtrl, _ := auth.GenerateKey(auth.HashNone, 32, "", nil)

	r.step("host 1: key, null DH group")
	r.verified("uni", 0, initiator.Options{HostNQN: *host1, DHChapSecret: k["HOST1_KEY"]})
	r.step("host 2: key and controller key, ffdhe2048, two I/O queues")
	r.verified("bidi", 1, initiator.Options{HostNQN: *host2, DHChapSecret: k["HOST2_KEY"], DHChapCtrlSecret: k["HOST2_CTRL_KEY"], NrIOQueues: 2})
	r.step("host 1 without a key")
	r.refused("missing", initiator.Options{HostNQN: *host1}, initiator.ErrAuthKeyRequired)
	r.step("host 1 with a wrong key")
	r.refused("wrong", initiator.Options{HostNQN: *host1, DHChapSecret: wrongKey.Encode()}, initiator.ErrAuthFailed)
	r.step("host 2 with a wrong controller key")
	r.refused("ctrlkey", initiator.Options{HostNQN: *host2, DHChapSecret: k["HOST2_KEY"], DHChapCtrlSecret: wrongCtrl.Encode()}, initiator.ErrAuthFailed)

	if r.nfail == 0 {
		fmt.Println("RESULT: PASS")
		return
	}
	fmt.Printf("RESULT: FAIL (%d)\n", r.nfail)
	os.Exit(1)
}

// pattern is 1 MiB of 512-byte blocks naming tag and block number.
func pattern(tag string) []byte {
	var b bytes.Buffer
	for i := 0; i < 2048; i++ {
		fmt.Fprintf(&b, "auth-%-5s blk %08d %0487d\n", tag, i, i)
	}
	return b.Bytes()
}

func (r *run) verified(tag string, offMiB int64, o initiator.Options) {
	o.SubsystemNQN = r.nqn
	o.Logger = r.log.Named(tag)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	t0 := time.Now()
	ctrl, err := initiator.Connect(ctx, r.dialer, r.addr, o)
	if err != nil {
		r.fail("%s: connect: %v", tag, err)
		return
	}
	defer ctrl.Close()
	r.pass("%s: connected and authenticated in %v: cntlid %d, %d I/O queues", tag, time.Since(t0).Round(time.Millisecond), ctrl.CntlID(), ctrl.NumIOQueues())
	ns, err := ctrl.Namespace(1)
	if err != nil {
		r.fail("%s: namespace 1: %v", tag, err)
		return
	}
	want := pattern(tag)
	if _, err := ns.WriteAt(want, offMiB<<20); err != nil {
		r.fail("%s: write: %v", tag, err)
		return
	}
	got := make([]byte, len(want))
	if _, err := ns.ReadAt(got, offMiB<<20); err != nil {
		r.fail("%s: read: %v", tag, err)
		return
	}
	if !bytes.Equal(got, want) {
		r.fail("%s: read back differs", tag)
		return
	}
	r.pass("%s: verified I/O (1 MiB at %d MiB)", tag, offMiB)
}

func (r *run) refused(tag string, o initiator.Options, want error) {
	o.SubsystemNQN = r.nqn
	o.Logger = r.log.Named(tag)
	ctx, cancel := context.WithTimeout(context.Background(), r.boundRefuse)
	defer cancel()
	t0 := time.Now()
	ctrl, err := initiator.Connect(ctx, r.dialer, r.addr, o)
	el := time.Since(t0).Round(time.Millisecond)
	switch {
	case err == nil:
		ctrl.Close()
		r.fail("%s: connect succeeded", tag)
	case !errors.Is(err, want):
		r.fail("%s: refused after %v, but not with %q: %v", tag, el, want, err)
	default:
		r.pass("%s: refused after %v: %v", tag, el, err)
	}
}

func readEnv(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			m[k] = v
		}
	}
	return m, sc.Err()
}
