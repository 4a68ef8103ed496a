package soft_test

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"os"
	"syscall"
	"testing"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/rdmatest"
	"github.com/nvmeof/nvmeof/rdma/soft"
)

// The provider-conformance suite (package rdmatest) over soft devices on
// loopback addresses of their own (no other test binary uses
// 127.77.0.0/24): two devices, and one device whose QPs connect to each
// other through its own address, as on a NIC or rxe; then both again on
// ::1.
var (
	conformanceA   = netip.MustParseAddr("127.77.0.1")
	conformanceB   = netip.MustParseAddr("127.77.0.2")
	conformanceOne = netip.MustParseAddr("127.77.0.3")
)

// softKnownFailures are conformance failures of the soft provider that
// are tracked for a fix in rdma/soft (outside this test's scope).
var softKnownFailures = map[string]string{}

func TestConformance(t *testing.T) {
	o := rdmatest.Options{KnownFailures: softKnownFailures}
	t.Run("two-devices", func(t *testing.T) {
		rdmatest.RunOptions(t, func(t testing.TB) (rdma.Device, rdma.Device) {
			return openConformance(t, conformanceA, conformanceB)
		}, o)
	})
	t.Run("one-device", func(t *testing.T) {
		rdmatest.RunOptions(t, func(t testing.TB) (rdma.Device, rdma.Device) {
			d, _ := openConformance(t, conformanceOne)
			return d, d
		}, o)
	})
	// IPv6 on ::1, the only IPv6 loopback address: the devices bind UDP
	// ports the kernel picks and send to each other's (to their own, for
	// one device), so that no other test binary's ::1:4791 is in the way.
	t.Run("ipv6-two-devices", func(t *testing.T) {
		rdmatest.RunOptions(t, func(t testing.TB) (rdma.Device, rdma.Device) {
			a, b := openIPv6(t), openIPv6(t)
			a.SetPeerUDPPort(b.UDPPort())
			b.SetPeerUDPPort(a.UDPPort())
			return a, b
		}, o)
	})
	t.Run("ipv6-one-device", func(t *testing.T) {
		rdmatest.RunOptions(t, func(t testing.TB) (rdma.Device, rdma.Device) {
			d := openIPv6(t)
			d.SetPeerUDPPort(d.UDPPort())
			return d, d
		}, o)
	})
}

// openIPv6 opens a soft device on ::1 with a UDP port of its own,
// closed when t ends, or skips t when the machine has no IPv6 loopback.
func openIPv6(t testing.TB) *soft.Device {
	t.Helper()
	d, err := soft.Open(soft.Config{Addr: netip.IPv6Loopback(), UDPPort: -1})
	if errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.EAFNOSUPPORT) {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	if err != nil {
		t.Fatalf("open a soft device on ::1: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// openConformance opens soft devices on addrs (all or none), closed when
// t ends. Another binary holding one of them (EADDRINUSE) is not waited
// for: all are released and the same hosts are tried in another
// 127.77.N.0/24, up to 64 of them.
func openConformance(t testing.TB, addrs ...netip.Addr) (rdma.Device, rdma.Device) {
	t.Helper()
	for try := 0; ; try++ {
		var devs []*soft.Device
		var err error
		for _, a := range addrs {
			var d *soft.Device
			if d, err = soft.Open(soft.Config{Addr: a}); err != nil {
				break
			}
			devs = append(devs, d)
		}
		if err == nil {
			t.Cleanup(func() {
				for _, d := range devs {
					d.Close()
				}
			})
			if len(devs) == 1 {
				return devs[0], nil
			}
			return devs[0], devs[1]
		}
		for _, d := range devs {
			d.Close()
		}
		if errors.Is(err, syscall.EPERM) || errors.Is(err, os.ErrPermission) {
			t.Skipf("soft device: %v", err)
		}
		if !errors.Is(err, syscall.EADDRINUSE) || try == 64 {
			t.Fatalf("open soft devices on %v: %v", addrs, err)
		}
		n := byte(1 + rand.IntN(254))
		for i, a := range addrs {
			b := a.As4()
			b[2] = n
			addrs[i] = netip.AddrFrom4(b)
		}
	}
}
