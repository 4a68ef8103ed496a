package rdma

import "github.com/nvmeof/nvmeof/rdma"

// verbs holds the verbs objects of one queue, host or target side.
type verbs struct {
	pd rdma.PD
	cq rdma.CQ
	qp rdma.QP
	mr rdma.MR
}

// destroy releases whatever was created, in reverse order.
func (v *verbs) destroy() {
	if v.qp != nil {
		v.qp.Destroy()
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

// poll runs handle on every completion of the CQ until closing is closed:
// it polls until the CQ is empty, then waits for its notification.
func (v *verbs) poll(closing <-chan struct{}, handle func(*rdma.WorkCompletion)) {
	wcs := make([]rdma.WorkCompletion, 32)
	notify := v.cq.Notify()
	for {
		n := v.cq.Poll(wcs)
		for i := range wcs[:n] {
			handle(&wcs[i])
		}
		if n > 0 {
			continue
		}
		select {
		case <-notify:
		case <-closing:
			return
		}
	}
}
