package ibverbs

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/rdma"
)

// MRAllocator is implemented by this provider's PDs: AllocMR registers n
// bytes from AllocBuffer (memory Go does not manage) and unmaps them at
// Deregister. Code that allocates buffers only to register them (receive
// pools, bounce buffers) can type-assert an rdma.PD to it instead of
// registering Go memory, which RegMR must pin.
type MRAllocator interface {
	AllocMR(n int, access rdma.Access) (rdma.MR, error)
}

// hugePage is the huge page size AllocBuffer tries: the default on x86-64
// and arm64.
const hugePage = 2 << 20

// AllocBuffer returns n zeroed bytes outside the Go heap, for buffers a
// NIC accesses by DMA (see mr.go: registering them needs no pin). It is
// anonymous mmap'd memory: on 2 MiB huge pages when n is a multiple of
// 2 MiB and the system has them reserved (vm.nr_hugepages), as SPDK
// allocates (fewer translation entries in the NIC), else on normal pages.
// It is marked MADV_DONTFORK, as ibv_fork_init would, so a child process
// never shares it copy-on-write under the NIC. Free it with FreeBuffer.
func AllocBuffer(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("ibverbs: allocate %d bytes: size must be positive", n)
	}
	const prot, flags = unix.PROT_READ | unix.PROT_WRITE, unix.MAP_PRIVATE | unix.MAP_ANONYMOUS
	var b []byte
	err := errors.ErrUnsupported
	if n%hugePage == 0 {
		b, err = unix.Mmap(-1, 0, n, prot, flags|unix.MAP_HUGETLB)
	}
	if err != nil {
		if b, err = unix.Mmap(-1, 0, n, prot, flags); err != nil {
			return nil, fmt.Errorf("ibverbs: mmap %d bytes: %w", n, err)
		}
	}
	if err := unix.Madvise(b, unix.MADV_DONTFORK); err != nil {
		unix.Munmap(b)
		return nil, fmt.Errorf("ibverbs: madvise(MADV_DONTFORK) %d bytes: %w", n, err)
	}
	return b, nil
}

// FreeBuffer unmaps a buffer from AllocBuffer (the slice it returned, not
// a reslice). The buffer must no longer be registered.
func FreeBuffer(b []byte) error {
	if err := unix.Munmap(b); err != nil {
		return fmt.Errorf("ibverbs: munmap %d bytes: %w", len(b), err)
	}
	return nil
}
