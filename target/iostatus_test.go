package target

import (
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/target/bdev"
)

// TestIOStatus maps each backend error to the completion status and
// error location the host sees (docs/backends.md, "Statuses").
func TestIOStatus(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("bdev: file %q: write at 0: %w", "/x", err) }
	tests := []struct {
		name   string
		op     nvme.IOOpcode
		err    error
		status nvme.Status
		loc    uint16
	}{
		{"EIO on read", nvme.IORead, wrap(syscall.EIO), nvme.StatusUnrecoveredReadError, locSLBA},
		{"EIO on compare", nvme.IOCompare, syscall.EIO, nvme.StatusUnrecoveredReadError, locSLBA},
		{"EIO on verify", nvme.IOVerify, syscall.EIO, nvme.StatusUnrecoveredReadError, locSLBA},
		{"EIO on write", nvme.IOWrite, wrap(syscall.EIO), nvme.StatusWriteFault, locSLBA},
		{"EIO on flush", nvme.IOFlush, syscall.EIO, nvme.StatusWriteFault, locSLBA},
		{"EIO on write zeroes", nvme.IOWriteZeroes, syscall.EIO, nvme.StatusWriteFault, locSLBA},
		{"ENODATA on read", nvme.IORead, syscall.ENODATA, nvme.StatusUnrecoveredReadError, locSLBA},
		{"ENOSPC on write", nvme.IOWrite, wrap(syscall.ENOSPC), nvme.StatusCapacityExceeded, locLength},
		{"ENOSPC on flush", nvme.IOFlush, syscall.ENOSPC, nvme.StatusCapacityExceeded, locLength},
		{"EDQUOT on write", nvme.IOWrite, syscall.EDQUOT, nvme.StatusCapacityExceeded, locLength},
		{"EFBIG on write", nvme.IOWrite, syscall.EFBIG, nvme.StatusCapacityExceeded, locLength},
		{"EREMOTEIO", nvme.IORead, syscall.EREMOTEIO, nvme.StatusLBAOutOfRange, locSLBA},
		{"out of range", nvme.IORead, &bdev.RangeError{Op: "read", Off: 1 << 20, Len: 512, Size: 1 << 20}, nvme.StatusLBAOutOfRange, locSLBA},
		{"EOPNOTSUPP on discard", nvme.IODatasetManagement, syscall.EOPNOTSUPP, nvme.StatusInvalidOpcode, locOpcode},
		{"not supported", nvme.IOWriteZeroes, bdev.ErrNotSupported, nvme.StatusInvalidOpcode, locOpcode},
		{"EROFS on write", nvme.IOWrite, syscall.EROFS, nvme.StatusNamespaceWriteProtected, locNSID},
		{"file shrank under a read", nvme.IORead, wrap(io.ErrUnexpectedEOF), nvme.StatusInternalError, locOpcode},
		{"closed", nvme.IORead, bdev.ErrClosed, nvme.StatusInternalError, locOpcode},
		{"anything else", nvme.IOWrite, errors.New("boom"), nvme.StatusInternalError, locOpcode},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, loc := ioStatus(tc.op, tc.err)
			if s.Status != tc.status || !s.DNR || loc != tc.loc {
				t.Fatalf("ioStatus(%v, %v) = %+v at %d, want %v (DNR) at %d", tc.op, tc.err, s, loc, tc.status, tc.loc)
			}
		})
	}
}
