package bdev

// Completion receives the result of an operation started through Async.
type Completion interface {
	// Complete is called exactly once per operation started, with nil or
	// the operation's error, from any goroutine: a backend's own thread
	// (librbd's for rbd), or the caller's when the operation fails
	// before it starts (closed device, range). It must not block.
	Complete(err error)
}

// Async is implemented by backends with asynchronous I/O (rbd): each
// method starts the operation and returns without waiting for it; the
// result goes to c. The target uses it from the transport's goroutine for
// the common commands, so no goroutine waits on the backend; everything
// else (Compare, a Flush of every namespace) still runs through Device's
// blocking methods on the namespace's workers. Buffers must stay
// untouched until Complete.
type Async interface {
	ReadAsync(p []byte, off int64, c Completion)
	WriteAsync(p []byte, off int64, c Completion)
	FlushAsync(c Completion)
	WriteZeroesAsync(off, n int64, c Completion)
	DiscardAsync(off, n int64, c Completion)
}

// SizeWatcher is implemented by backends whose size can change under the
// target (an RBD image resized with `rbd resize`). WatchSize makes the
// device call changed, from a goroutine of its own, each time it sees
// Size change; Close stops it. The target then reads the size again and
// raises a Namespace Attribute Changed event.
type SizeWatcher interface {
	WatchSize(changed func())
}
