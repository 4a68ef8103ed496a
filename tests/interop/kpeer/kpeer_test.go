package kpeer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEmulatorFault: a guest log line of a stalled virtio-net transmit
// queue is found in any guest's logs; ordinary failures are not taken for
// one.
func TestEmulatorFault(t *testing.T) {
	share := t.TempDir()
	write := func(name, text string) {
		p := filepath.Join(share, "out", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a/console.log", "[   12.1] nvme nvme0: I/O tag 3 timeout\nKPEER-RC=1\n")
	write("host-cmd.log", "nvmetd: listening\n")
	if f := emulatorFault(share); f != "" {
		t.Fatalf("emulatorFault = %q for an ordinary failure", f)
	}
	write("b/dmesg.txt", "[  301.5] ------------[ cut here ]------------\n[  301.5] NETDEV WATCHDOG: eth0 (virtio_net): transmit queue 0 timed out 5120 ms\n")
	if f := emulatorFault(share); !strings.HasPrefix(f, "b/dmesg.txt: ") || !strings.Contains(f, "transmit queue 0 timed out") {
		t.Fatalf("emulatorFault = %q, want the watchdog line of b/dmesg.txt", f)
	}
}
