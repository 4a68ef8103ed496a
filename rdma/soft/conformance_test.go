package soft_test

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/rdmatest"
	"github.com/nvmeof/nvmeof/rdma/soft"
)

// The provider-conformance suite (package rdmatest) over soft devices on
// loopback addresses of their own (no other test binary uses
// 127.77.0.0/24): two devices, and one device whose QPs connect to each
// other through its own address, as on a NIC or rxe.
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
}

// openConformance opens soft devices on addrs (all or none: another test
// binary holding one of them makes Open fail with EADDRINUSE, and then
// all are released and tried again for a while), closed when t ends.
func openConformance(t testing.TB, addrs ...netip.Addr) (rdma.Device, rdma.Device) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
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
		if !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			t.Fatalf("open soft devices on %v: %v", addrs, err)
		}
		time.Sleep(time.Duration(10+rand.IntN(40)) * time.Millisecond)
	}
}
