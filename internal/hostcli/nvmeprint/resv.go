package nvmeprint

import (
	"encoding/hex"
	"fmt"
	"io"

	"github.com/nvmeof/nvmeof/nvme"
)

// ResvReport prints the Reservation Status as nvme-cli does: the
// header's fields in decimal, each registrant's in hex (JSON: the same
// names).
func ResvReport(w io.Writer, format string, st nvme.ReservationStatus, eds bool) error {
	hostID := func(r nvme.RegisteredController) string {
		if eds {
			return hex.EncodeToString(r.HostID[:])
		}
		return hex.EncodeToString(r.HostID[:8])
	}
	if format == JSON {
		regs := make([]Obj, 0, len(st.Controllers))
		for _, r := range st.Controllers {
			rcsts := 0
			if r.Holder {
				rcsts = 1
			}
			regs = append(regs, Obj{{"cntlid", r.CNTLID}, {"rcsts", rcsts}, {"hostid", hostID(r)}, {"rkey", r.RKEY}})
		}
		ptpls := 0
		if st.PTPLS {
			ptpls = 1
		}
		return WriteJSON(w, Obj{{"gen", st.Generation}, {"rtype", uint8(st.Type)}, {"regctl", st.Registrants},
			{"ptpls", ptpls}, {"regctls", regs}})
	}
	ew := &errWriter{w: w}
	ew.printf("\nNVME Reservation status:\n\n")
	ew.printf("gen       : %d\n", st.Generation)
	ew.printf("rtype     : %d\n", uint8(st.Type))
	ew.printf("regctl    : %d\n", st.Registrants)
	ptpls := 0
	if st.PTPLS {
		ptpls = 1
	}
	ew.printf("ptpls     : %d\n", ptpls)
	for i, r := range st.Controllers {
		rcsts := 0
		if r.Holder {
			rcsts = 1
		}
		if eds {
			ew.printf("regctlext[%d] :\n", i)
			ew.printf("  cntlid     : %x\n", r.CNTLID)
			ew.printf("  rcsts      : %x\n", rcsts)
			ew.printf("  rkey       : %x\n", r.RKEY)
			ew.printf("  hostid     : %s\n", hostID(r))
		} else {
			ew.printf("regctl[%d] :\n", i)
			ew.printf("  cntlid  : %x\n", r.CNTLID)
			ew.printf("  rcsts   : %x\n", rcsts)
			ew.printf("  hostid  : %s\n", hostID(r))
			ew.printf("  rkey    : %x\n", r.RKEY)
		}
	}
	ew.printf("\n")
	return ew.err
}

// errWriter keeps the first write error of a sequence of prints.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(f string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, f, args...)
	}
}

// ResvDone prints the success of a reservation register, acquire or
// release as nvme-cli does.
func ResvDone(w io.Writer, format string, op nvme.IOOpcode, nsid uint32) error {
	name := map[nvme.IOOpcode]string{nvme.IOReservationRegister: "", nvme.IOReservationAcquire: "Acquire",
		nvme.IOReservationRelease: "Release"}[op]
	if format == JSON {
		return WriteJSON(w, Obj{{"command", "resv-" + map[nvme.IOOpcode]string{nvme.IOReservationRegister: "register",
			nvme.IOReservationAcquire: "acquire", nvme.IOReservationRelease: "release"}[op]}, {"namespace-id", nsid}, {"result", "success"}})
	}
	_, err := fmt.Fprintf(w, "NVME Reservation %s success\n", name)
	return err
}
