package rdma

import "github.com/nvmeof/nvmeof/rdma"

// verbs holds the verbs objects of one queue, host or target side.
type verbs struct {
	pd rdma.PD
	cq rdma.CQ
	qp rdma.QP
	mr rdma.MR
}

// destroy releases whatever was created, in reverse order; extra are the
// queue's regions beyond mr (nil ones skipped), deregistered after the QP
// and before the PD.
func (v *verbs) destroy(extra ...rdma.MR) {
	if v.qp != nil {
		v.qp.Destroy()
	}
	for _, m := range extra {
		if m != nil {
			m.Deregister()
		}
	}
	if v.mr != nil {
		v.mr.Deregister()
	}
	if v.cq != nil {
		v.cq.Destroy()
	}
	if v.pd != nil {
		v.pd.Dealloc()
	}
}

// poll runs handle on every completion of the CQ until closing is closed.
// With direct set and a CQ that can run handlers (rdma.HandlerCQ), the
// provider calls handle itself on the goroutine that produced the
// completions (for the soft device, its receive goroutine: no hand-off
// between the packet and the NVMe queue), and poll just waits; handle
// must then never block. Otherwise poll polls until the CQ is empty, then
// waits for its notification. When poll returns, handle is not running
// and will not be called again.
func (v *verbs) poll(closing <-chan struct{}, direct bool, handle func(*rdma.WorkCompletion), batch batcher) {
	handleAll := func(wcs []rdma.WorkCompletion) {
		if batch != nil {
			batch.begin()
		}
		for i := range wcs {
			handle(&wcs[i])
		}
		if batch != nil {
			batch.flushPlug()
			batch.end()
		}
	}
	if hcq, ok := v.cq.(rdma.HandlerCQ); ok && direct {
		hcq.SetHandler(handleAll)
		<-closing
		hcq.SetHandler(nil)
		return
	}
	wcs := make([]rdma.WorkCompletion, 32)
	notify := v.cq.Notify()
	for {
		if n := v.cq.Poll(wcs); n > 0 {
			handleAll(wcs[:n])
			continue
		}
		select {
		case <-notify:
		case <-closing:
			return
		}
	}
}

// batcher is told where a batch of completions begins and ends, so that
// it can post the work the batch produced as one chain; flushPlug, on
// the goroutine that handled the batch, before end: the backends submit
// the operations the batch's commands started (fabrics.SubmitPlug).
type batcher interface {
	begin()
	flushPlug()
	end()
}
