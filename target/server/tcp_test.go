package server

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/fabrics"
	nvmetcp "github.com/nvmeof/nvmeof/fabrics/tcp"
	"github.com/nvmeof/nvmeof/initiator"
)

// freeTCPPort returns a TCP port nothing listens on at addr now.
func freeTCPPort(t *testing.T, addr string) uint16 {
	t.Helper()
	l, err := net.Listen("tcp", addr+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

// TestServeTCP serves a tcp port: the discovery log names it with trtype
// tcp and the TCP TSAS (no security), and the initiator over this
// module's NVMe/TCP host reads back what it wrote, digests off and on.
func TestServeTCP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const addr = "127.0.44.1"
	svc := freeTCPPort(t, addr)
	src := fmt.Sprintf(`
port "t1" {
  transport = "tcp"
  address   = %q
  service   = %d
}
subsystem %q {
  ports          = ["t1"]
  allow_any_host = true
  %s
}
`, addr, svc, nqn, ns1)
	tree, err := configfs.ParseHCL([]byte(src), "tcp.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(tree, Options{}); err != nil {
		t.Fatalf("Check: %v", err)
	}
	s := New(Options{})
	defer s.Close()
	if err := s.Apply(tree); err != nil {
		t.Fatal(err)
	}
	// The port is taken now: Check says so.
	if err := Check(tree, Options{}); err == nil {
		t.Error("Check passed with the tcp port in use")
	}
	taddr := fabrics.Address{Transport: fabrics.TransportTCP, Addr: netip.MustParseAddr(addr), ServiceID: svc}
	ents, err := initiator.Discover(ctx, nvmetcp.NewDialer(nvmetcp.HostConfig{}), taddr, initiator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, e := range ents {
		if e.SubNQN != nqn {
			continue
		}
		found = true
		if e.TRType != fabrics.TRTypeTCP || e.TRADDR != addr || e.TRSVCID != fmt.Sprint(svc) || e.TSAS != fabrics.TCPTSAS(fabrics.TCPSecTypeNone) {
			t.Errorf("discovery entry %+v", e.DiscoveryRecord)
		}
	}
	if !found {
		t.Fatalf("no discovery entry for %s in %d", nqn, len(ents))
	}
	for _, dg := range []bool{false, true} {
		d := nvmetcp.NewDialer(nvmetcp.HostConfig{HeaderDigest: dg, DataDigest: dg})
		ctrl, err := initiator.Connect(ctx, d, taddr, initiator.Options{SubsystemNQN: nqn, NrIOQueues: 2})
		if err != nil {
			t.Fatalf("digests %v: %v", dg, err)
		}
		nss := ctrl.Namespaces()
		if len(nss) != 1 {
			t.Fatalf("%d namespaces", len(nss))
		}
		want := bytes.Repeat([]byte(fmt.Sprintf("%v-0123456789abc", dg)), 8192)[:128<<10]
		for _, off := range []int64{0, 1 << 20} {
			if _, err := nss[0].WriteAt(want[:4096+int(off>>10)], off); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := nss[0].WriteAt(want, 2<<20); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(want))
		if _, err := nss[0].ReadAt(got, 2<<20); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("digests %v: read back: err %v, equal %t", dg, err, bytes.Equal(got, want))
		}
		if err := ctrl.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
