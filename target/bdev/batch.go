package bdev

// Batch holds what the completions of one reaping pass of a backend leave
// to be done together at the end of the pass (the target: sending their
// responses, one send per queue). The backend's reaper calls Flush after
// the last completion of each pass, before it waits again, and before it
// exits: nothing stays held.
type Batch interface {
	Flush()
}

// BatchCompletion is a Completion that can join the batch of the pass
// that completes it. The io_uring engine calls CompleteBatched instead of
// Complete from its reaper goroutine; every other path (an operation that
// fails before it starts, a fallback on the slow goroutine) still calls
// Complete.
type BatchCompletion interface {
	Completion
	// NewBatch returns an empty batch for one reaper goroutine. A reaper
	// asks the first BatchCompletion it completes, once, and then hands
	// that batch to every CompleteBatched: an implementation given a
	// batch it did not make completes as Complete does.
	NewBatch() Batch
	// CompleteBatched is Complete from a reaping pass: the work it may
	// defer goes into b, which the reaper flushes at the end of the pass.
	// It runs on the reaper goroutine and must not block.
	CompleteBatched(err error, b Batch)
}

// Plug is a transport goroutine's submission plug (fabrics.SubmitPlug):
// a backend that holds an operation back instead of submitting it joins
// the plug, and the goroutine calls FlushPlug on every backend that
// joined before it waits.
type Plug interface {
	Join(f interface{ FlushPlug() })
}

// PluggedCompletion is a Completion whose operation may wait in its
// submitter's Plug. The io_uring engine asks SubmitPlug once, in the
// Async call that starts the operation, on the caller's goroutine: a
// Plug means that goroutine flushes it before it waits; nil submits at
// once.
type PluggedCompletion interface {
	Completion
	SubmitPlug() Plug
}
