package rdma

import (
	"encoding/binary"
	"fmt"
)

// Lengths of the NVMe/RDMA CM private data (NVMe over Fabrics RDMA
// transport specification, figures 4-6; Linux struct nvme_rdma_cm_req,
// nvme_rdma_cm_rep, nvme_rdma_cm_rej).
const (
	CMRequestLen = 32
	CMAcceptLen  = 32
	CMRejectLen  = 4
)

// CMRecfmt is the only record format defined (RECFMT 0).
const CMRecfmt = 0

// CMRequest is a view of the RDMA_CM_REQUEST private data a host sends to
// open a queue.
type CMRequest []byte

// ParseCMRequest checks the length of request private data (the bytes
// after the rdma_cm header) and returns a view of it.
func ParseCMRequest(b []byte) (CMRequest, error) {
	if len(b) < CMRequestLen {
		return nil, fmt.Errorf("nvme-rdma: CM request private data of %d bytes, want %d", len(b), CMRequestLen)
	}
	return CMRequest(b[:CMRequestLen]), nil
}

// Recfmt returns the record format.
func (r CMRequest) Recfmt() uint16 { return binary.LittleEndian.Uint16(r[0:]) }

// QID returns the queue ID the host opens (0 = admin queue).
func (r CMRequest) QID() uint16 { return binary.LittleEndian.Uint16(r[2:]) }

// HRQSize returns the host receive queue size (number of CQEs the host can
// take), 1's based.
func (r CMRequest) HRQSize() uint16 { return binary.LittleEndian.Uint16(r[4:]) }

// HSQSize returns the host send queue size, 0's based (as the SQSIZE of
// the Connect command).
func (r CMRequest) HSQSize() uint16 { return binary.LittleEndian.Uint16(r[6:]) }

// CntlID returns the controller ID for an I/O queue (0 from hosts that do
// not send it, such as Linux 6.1).
func (r CMRequest) CntlID() uint16 { return binary.LittleEndian.Uint16(r[8:]) }

// Set writes every field and clears the reserved bytes.
func (r CMRequest) Set(qid, hrqsize, hsqsize, cntlid uint16) {
	clear(r[:CMRequestLen])
	binary.LittleEndian.PutUint16(r[0:], CMRecfmt)
	binary.LittleEndian.PutUint16(r[2:], qid)
	binary.LittleEndian.PutUint16(r[4:], hrqsize)
	binary.LittleEndian.PutUint16(r[6:], hsqsize)
	binary.LittleEndian.PutUint16(r[8:], cntlid)
}

// CMAccept is a view of the RDMA_CM_ACCEPT private data a target sends
// when it accepts a queue.
type CMAccept []byte

// ParseCMAccept checks the length of accept private data and returns a view.
func ParseCMAccept(b []byte) (CMAccept, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("nvme-rdma: CM accept private data of %d bytes, want at least 4", len(b))
	}
	return CMAccept(b), nil
}

// Recfmt returns the record format.
func (a CMAccept) Recfmt() uint16 { return binary.LittleEndian.Uint16(a[0:]) }

// CRQSize returns the controller receive queue size (commands the target
// can take at once).
func (a CMAccept) CRQSize() uint16 { return binary.LittleEndian.Uint16(a[2:]) }

// Set writes the fields and clears the reserved bytes.
func (a CMAccept) Set(crqsize uint16) {
	clear(a)
	binary.LittleEndian.PutUint16(a[0:], CMRecfmt)
	binary.LittleEndian.PutUint16(a[2:], crqsize)
}

// CMRejectStatus is the STS of an RDMA_CM_REJECT.
type CMRejectStatus uint16

// Reject statuses (NVMe/RDMA transport specification figure 6; Linux
// enum nvme_rdma_cm_status).
const (
	CMInvalidLength  CMRejectStatus = 0x01 // invalid private data length
	CMInvalidRecfmt  CMRejectStatus = 0x02
	CMInvalidQID     CMRejectStatus = 0x03
	CMInvalidHSQSize CMRejectStatus = 0x04
	CMInvalidHRQSize CMRejectStatus = 0x05
	CMNoResources    CMRejectStatus = 0x06
	CMInvalidIRD     CMRejectStatus = 0x07
	CMInvalidORD     CMRejectStatus = 0x08
	CMInvalidCntlID  CMRejectStatus = 0x09
)

var cmRejectNames = map[CMRejectStatus]string{
	CMInvalidLength:  "invalid private data length",
	CMInvalidRecfmt:  "invalid record format",
	CMInvalidQID:     "invalid queue ID",
	CMInvalidHSQSize: "invalid host SQ size",
	CMInvalidHRQSize: "invalid host RQ size",
	CMNoResources:    "no resources",
	CMInvalidIRD:     "invalid IRD",
	CMInvalidORD:     "invalid ORD",
	CMInvalidCntlID:  "invalid controller ID",
}

// String names the status as the Linux host prints it.
func (s CMRejectStatus) String() string {
	if n, ok := cmRejectNames[s]; ok {
		return n
	}
	return fmt.Sprintf("unrecognized reason (%#x)", uint16(s))
}

// CMReject is a view of the RDMA_CM_REJECT private data.
type CMReject []byte

// ParseCMReject checks the length of reject private data and returns a view.
func ParseCMReject(b []byte) (CMReject, error) {
	if len(b) < CMRejectLen {
		return nil, fmt.Errorf("nvme-rdma: CM reject private data of %d bytes, want %d", len(b), CMRejectLen)
	}
	return CMReject(b), nil
}

// Recfmt returns the record format.
func (r CMReject) Recfmt() uint16 { return binary.LittleEndian.Uint16(r[0:]) }

// Status returns the reject status.
func (r CMReject) Status() CMRejectStatus {
	return CMRejectStatus(binary.LittleEndian.Uint16(r[2:]))
}

// Set writes the fields.
func (r CMReject) Set(sts CMRejectStatus) {
	binary.LittleEndian.PutUint16(r[0:], CMRecfmt)
	binary.LittleEndian.PutUint16(r[2:], uint16(sts))
}

// RejectError is the error a host sees when the target rejects a queue.
type RejectError struct{ Status CMRejectStatus }

// Error implements error.
func (e *RejectError) Error() string {
	return "nvme-rdma: target rejected the queue: " + e.Status.String()
}
