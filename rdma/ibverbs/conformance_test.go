//go:build ibverbs && cgo

package ibverbs_test

import (
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/ibverbs"
	"github.com/nvmeof/nvmeof/rdma/rdmatest"
)

// Environment of the conformance run. Without NVMEOF_IBVERBS_ADDR the
// test skips: it needs an RDMA device (rxe or a NIC) holding that address.
const (
	envAddr    = "NVMEOF_IBVERBS_ADDR"        // the device's IP address (required)
	envDevice  = "NVMEOF_IBVERBS_DEVICE"      // its name ("rxe0", "mlx5_0"); empty: by address
	envAddr2   = "NVMEOF_IBVERBS_ADDR2"       // a second device's address; empty: both ends on the first device
	envDevice2 = "NVMEOF_IBVERBS_DEVICE2"     // the second device's name
	envLarge   = "NVMEOF_CONFORMANCE_LARGE"   // bytes of the multi-packet transfers (default rdmatest's)
	envTimeout = "NVMEOF_CONFORMANCE_TIMEOUT" // each wait, as a Go duration (default rdmatest's)
)

// TestConformance runs the provider-conformance suite (package rdmatest)
// against the ibverbs device at $NVMEOF_IBVERBS_ADDR: both ends on that
// one device (its QPs connect through its own GID), or on two devices
// with $NVMEOF_IBVERBS_ADDR2.
func TestConformance(t *testing.T) {
	addr := os.Getenv(envAddr)
	if addr == "" {
		t.Skipf("set %s (and optionally %s) to the address of an RDMA device to run the conformance suite", envAddr, envDevice)
	}
	var o rdmatest.Options
	if s := os.Getenv(envLarge); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("%s=%q: want a positive number of bytes", envLarge, s)
		}
		o.LargeSize = n
	}
	if s := os.Getenv(envTimeout); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive duration", envTimeout, s)
		}
		o.Timeout = d
	}
	o.KnownFailures = map[string]string{} // filled by the opener, which RunOptions calls first
	rdmatest.RunOptions(t, func(t testing.TB) (rdma.Device, rdma.Device) {
		a := openDevice(t, addr, os.Getenv(envDevice))
		b := a
		if addr2 := os.Getenv(envAddr2); addr2 != "" {
			b = openDevice(t, addr2, os.Getenv(envDevice2))
		}
		for _, d := range []ibverbs.Device{a, b} {
			for k, v := range ibverbs.KnownFailures(d) {
				o.KnownFailures[k] = v
			}
		}
		return a, b
	}, o)
}

// openDevice opens the device at addr (named name, if set), closed when
// t ends, and logs what it is.
func openDevice(t testing.TB, addr, name string) ibverbs.Device {
	t.Helper()
	a, err := netip.ParseAddr(addr)
	if err != nil {
		t.Fatalf("%s=%q: %v", envAddr, addr, err)
	}
	d, err := ibverbs.Open(ibverbs.Config{Addr: a, Name: name})
	if err != nil {
		t.Fatalf("ibverbs.Open(%v, %q): %v", a, name, err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("close %s: %v", d.Name(), err)
		}
	})
	t.Logf("ibverbs device %+v", d.Info())
	return d
}
