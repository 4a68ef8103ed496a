package fabrics

// BatchCompleter is implemented by a Completer that can take several
// completed requests of one queue at once and send their responses
// together (one writev on TCP, one chain of work requests on RDMA)
// instead of one send each. CompleteRequests is CompleteRequest for each
// of rs, in order; it must not block, and it must not keep rs.
type BatchCompleter interface {
	Completer
	CompleteRequests(rs []*Request)
}

// CompletionBatch gathers completed requests of any queues, of any
// controllers, and hands them back to their transports together: at
// Flush, each distinct Completer gets its requests once, in the order
// they were added (CompleteRequests when it is a BatchCompleter, else
// CompleteRequest each). A backend's reaper uses one for the completions
// of one pass (docs/backends.md): completions that come back one by one
// from a slow device then leave in one send per queue, as NIC and NVMe
// interrupt moderation do.
//
// A CompletionBatch is used by one goroutine. Its lists grow to the
// largest batch and are reused: a steady state allocates nothing.
type CompletionBatch struct {
	rs  []*Request
	grp []*Request
}

// Add holds r until the next Flush. The handler's work on r is done: the
// request belongs to the transport again, only its sending waits.
func (b *CompletionBatch) Add(r *Request) { b.rs = append(b.rs, r) }

// Len returns how many requests wait for Flush.
func (b *CompletionBatch) Len() int { return len(b.rs) }

// Flush hands every held request to its transport and leaves b empty.
func (b *CompletionBatch) Flush() {
	// Queues per pass are few: grouping by a scan per distinct queue
	// costs less than sorting, and keeps each queue's order.
	for i := 0; i < len(b.rs); i++ {
		r := b.rs[i]
		if r == nil {
			continue
		}
		b.rs[i] = nil
		bc, ok := r.Completer.(BatchCompleter)
		if !ok {
			r.Complete()
			continue
		}
		grp := append(b.grp[:0], r)
		for j := i + 1; j < len(b.rs); j++ {
			if o := b.rs[j]; o != nil && o.Completer == r.Completer {
				grp = append(grp, o)
				b.rs[j] = nil
			}
		}
		if len(grp) == 1 {
			r.Complete()
		} else {
			bc.CompleteRequests(grp)
		}
		clear(grp) // no request stays reachable from here
		b.grp = grp[:0]
	}
	b.rs = b.rs[:0]
}

// SubmitPlug holds back the backend submissions of the commands one
// transport goroutine hands to the target between two waits (what one
// read or one receive batch brought), so that a backend submits them
// with one system call instead of one per command (Linux's blk_plug): a
// backend that holds an operation back joins the plug, and Flush makes
// every backend that joined submit what it holds. A SubmitPlug belongs to
// the goroutine that handles the commands it is given to (Request.Plug),
// which must Flush it before it waits. Its list grows to the most
// backends of one batch and is reused.
type SubmitPlug struct {
	held []interface{ FlushPlug() }
}

// Join records that f holds operations back until the next Flush; f
// joins once per batch, however many it holds.
func (p *SubmitPlug) Join(f interface{ FlushPlug() }) {
	for _, g := range p.held {
		if g == f {
			return
		}
	}
	p.held = append(p.held, f)
}

// Flush makes every backend that joined since the last Flush submit what
// it holds, and leaves p empty.
func (p *SubmitPlug) Flush() {
	for i := 0; i < len(p.held); i++ {
		f := p.held[i]
		p.held[i] = nil
		f.FlushPlug()
	}
	p.held = p.held[:0]
}
