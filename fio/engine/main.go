//go:build fioengine

// Command engine is nvmeof's fio external I/O engine, built as a C shared
// library with scripts/build-fio-engine.sh (go build -buildmode=c-shared
// -tags fioengine, compiled against the installed fio's headers) and
// loaded with fio's ioengine=external:PATH. engine.c is the fio side
// (struct ioengine_ops, options, io_u bookkeeping); this file exports the
// Go side, package fio's Engine, to it. See package fio for the options.
//
// Across the cgo boundary go only C memory and integers: the C shim keeps
// the io_u pointers and hands Go slot indices (fio's io_u->index), byte
// buffers that fio allocated, and arrays it owns for completions; Go keeps
// its engines behind runtime/cgo handles. This file is the engine's only
// use of unsafe, and needs it: fio's data buffers are C memory that Go must
// read and fill in place (unsafe.Slice over xfer_buf, valid until fio reaps
// the I/O), and the request and completion arrays are C arrays.
package main

/*
#include <stdlib.h>
#include <string.h>
#include "engine.h"
*/
import "C"

import (
	"context"
	"runtime/cgo"
	"time"
	"unsafe"

	"github.com/nvmeof/nvmeof/fio"
)

func main() {}

// handle is one fio job's engine and its reusable buffers.
type handle struct {
	e      *fio.Engine
	out    []fio.Completion // Reap's buffer, Depth entries
	failed []fio.Completion // requests Submit refused, reported first
}

func get(h C.uintptr_t) *handle { return cgo.Handle(h).Value().(*handle) }

// setErr writes err's message into the C buffer buf of n bytes.
func setErr(buf *C.char, n C.size_t, err error) {
	if buf == nil || n == 0 {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	m := copy(b[:len(b)-1], err.Error())
	b[m] = 0
}

// nvmeofOpen connects as c says and returns a handle, or 0 with the error
// message in errbuf. It fills in c.size and c.block_size.
//
//export nvmeofOpen
func nvmeofOpen(c *C.struct_nvmeof_config, errbuf *C.char, errlen C.size_t) C.uintptr_t {
	cfg := fio.Config{
		Transport:  C.GoString(c.transport),
		Traddr:     C.GoString(c.traddr),
		Trsvcid:    int(c.trsvcid),
		SubNQN:     C.GoString(c.subnqn),
		HostNQN:    C.GoString(c.hostnqn),
		HostTraddr: C.GoString(c.host_traddr),
		Provider:   C.GoString(c.provider),
		Device:     C.GoString(c.device),

		DHChapSecret:     C.GoString(c.dhchap_secret),
		DHChapCtrlSecret: C.GoString(c.dhchap_ctrl_secret),
		Congestion:       C.GoString(c.congestion),
		NSID:             uint32(c.nsid),
		NrIOQueues:       int(c.nr_io_queues),
		QueueSize:        int(c.queue_size),
		LoopSize:         int64(c.loop_size),
		BusyPoll:         time.Duration(c.busy_poll_us) * time.Microsecond,
		DelaySubmit:      c.delay_submit != 0,
		PollSleep:        c.poll_sleep == 1,
		PollSleepAuto:    c.poll_sleep == C.NVMEOF_POLL_SLEEP_AUTO,
		Depth:            int(c.depth),
	}
	e, err := fio.Open(context.Background(), cfg)
	if err != nil {
		setErr(errbuf, errlen, err)
		return 0
	}
	c.size = C.uint64_t(e.Size())
	c.block_size = C.uint32_t(e.BlockSize())
	h := &handle{
		e:      e,
		out:    make([]fio.Completion, e.Depth()),
		failed: make([]fio.Completion, 0, e.Depth()),
	}
	return C.uintptr_t(cgo.NewHandle(h))
}

// nvmeofSubmit starts n requests. A request the engine refuses completes
// with its error at the next nvmeofGetEvents.
//
//export nvmeofSubmit
func nvmeofSubmit(h C.uintptr_t, reqs *C.struct_nvmeof_req, n C.int) {
	hd := get(h)
	for _, r := range unsafe.Slice(reqs, int(n)) {
		req := fio.Request{Op: opOf(int(r.op)), Off: int64(r.off), Len: int64(r.len)}
		if (req.Op == fio.OpRead || req.Op == fio.OpWrite) && r.buf != nil && r.len > 0 {
			req.Buf = unsafe.Slice((*byte)(r.buf), int(r.len))
		}
		if err := hd.e.Submit(int(r.slot), req); err != nil {
			hd.failed = append(hd.failed, fio.Completion{Slot: int32(r.slot), Errno: fio.Errno(err), Resid: int64(r.len)})
		}
	}
}

// nvmeofGetEvents reaps between min and max completions into out (max
// entries), waiting at most timeoutNS nanoseconds (negative: no limit),
// and returns how many.
//
//export nvmeofGetEvents
func nvmeofGetEvents(h C.uintptr_t, min, max C.int, timeoutNS C.int64_t, out *C.struct_nvmeof_cqe) C.int {
	hd := get(h)
	cqes := unsafe.Slice(out, int(max))
	n := 0
	for _, f := range hd.failed {
		if n == len(cqes) {
			break
		}
		cqes[n] = C.struct_nvmeof_cqe{slot: C.int32_t(f.Slot), err: C.int32_t(f.Errno), resid: C.uint64_t(f.Resid)}
		n++
	}
	hd.failed = hd.failed[:copy(hd.failed, hd.failed[n:])]
	timeout := time.Duration(timeoutNS)
	if timeoutNS < 0 {
		timeout = -1
	}
	if n > 0 {
		timeout = 0
	}
	got := hd.e.Reap(int(min)-n, len(cqes)-n, timeout, hd.out)
	for _, c := range hd.out[:got] {
		cqes[n] = C.struct_nvmeof_cqe{slot: C.int32_t(c.Slot), err: C.int32_t(c.Errno), resid: C.uint64_t(c.Resid)}
		n++
	}
	return C.int(n)
}

// nvmeofErrDetails returns the error of the last request on slot as a
// string from malloc (fio frees it), or NULL.
//
//export nvmeofErrDetails
func nvmeofErrDetails(h C.uintptr_t, slot C.int) *C.char {
	if err := get(h).e.Err(int(slot)); err != nil {
		return C.CString(err.Error())
	}
	return nil
}

// nvmeofClose waits for the requests in flight, disconnects and releases
// the handle.
//
//export nvmeofClose
func nvmeofClose(h C.uintptr_t) {
	hd := get(h)
	_ = hd.e.Close()
	cgo.Handle(h).Delete()
}

// opOf maps the C side's NVMEOF_OP_* to the engine's operation; an
// unknown one maps to an operation Submit fails with EINVAL.
func opOf(op int) fio.Op {
	switch op {
	case C.NVMEOF_OP_READ:
		return fio.OpRead
	case C.NVMEOF_OP_WRITE:
		return fio.OpWrite
	case C.NVMEOF_OP_TRIM:
		return fio.OpTrim
	case C.NVMEOF_OP_FLUSH:
		return fio.OpFlush
	}
	return fio.Op(0xff)
}
