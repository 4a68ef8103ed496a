//go:build ibverbs && cgo

package ibverbs

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
)

// TestNoRDMAKernelHint: on a kernel without RDMA support rdma-core's
// ibv_get_device_list fails with ENOSYS, "function not implemented",
// which told the user nothing; the error says there are no RDMA devices
// and where to look.
func TestNoRDMAKernelHint(t *testing.T) {
	if _, err := os.Stat("/sys/class/infiniband_verbs"); err == nil {
		t.Skip("this kernel has RDMA support: ibv_get_device_list does not fail with ENOSYS")
	}
	_, err := Devices()
	if !errors.Is(err, syscall.ENOSYS) {
		t.Fatalf("Devices without kernel RDMA support: %v, want ENOSYS", err)
	}
	for _, w := range []string{"no RDMA devices", "rdma link"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
}
