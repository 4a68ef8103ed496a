package target

import (
	"fmt"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// Per-command tracing, at log level trace: one line per command a queue
// receives and one per completion, with the queue, the command's
// identifiers and the status. Whether to trace is read once when the queue
// is made (queue.trace), so that the I/O path pays one predictable branch
// when it is off; raising the level to trace takes effect for queues
// connected from then on.

// opName names a command of queue qid: a Fabrics, admin or I/O opcode.
func opName(qid uint16, sqe nvme.SQE) string {
	switch op := sqe.Opcode(); {
	case op == fabrics.OpcodeFabrics:
		return fabrics.FCType(sqe[4]).String()
	case qid == 0:
		return nvme.AdminOpcode(op).String()
	default:
		return nvme.IOOpcode(op).String()
	}
}

// traceCommand logs a command as it arrives.
func (q *queue) traceCommand(r *fabrics.Request) {
	sqe := nvme.SQE(r.SQE[:])
	q.log.Trace("command", "qid", q.qid, "cid", sqe.CID(), "op", opName(q.qid, sqe), "nsid", sqe.NSID(),
		"cdw10", fmt.Sprintf("%#x", sqe.CDW10()), "cdw11", fmt.Sprintf("%#x", sqe.CDW11()), "cdw12", fmt.Sprintf("%#x", sqe.CDW12()))
}

// traceCompletion logs a command's completion with status s.
func (q *queue) traceCompletion(r *fabrics.Request, s nvme.Error) {
	sqe := nvme.SQE(r.SQE[:])
	q.log.Trace("completion", "qid", q.qid, "cid", sqe.CID(), "op", opName(q.qid, sqe),
		"status", fmt.Sprintf("%#x", uint16(s.Status)), "dnr", s.DNR, "dw0", fmt.Sprintf("%#x", nvme.CQE(r.CQE[:]).DW0()))
}
