//go:build ibverbs && cgo

package ibverbs

/*
#include "ibverbs.h"
*/
import "C"

import "unsafe"

// retainable reports whether C may keep p after the call that passed it
// returns, as a NIC keeps a registered buffer's address: p is memory Go
// does not manage, or a pinned Go object. It asks cgo's own check
// (GODEBUG=cgocheck=1, the default), which panics when a Go pointer passed
// to C points at memory holding an unpinned Go pointer: here a Go holder
// of p. With the check off it always reports true; tests make sure it is
// on by checking that an unpinned slice is refused.
func retainable(p unsafe.Pointer) (ok bool) {
	holder := &struct{ p unsafe.Pointer }{p}
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	C.nv_keep(unsafe.Pointer(holder))
	return true
}
