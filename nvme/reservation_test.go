package nvme

import (
	"bytes"
	"errors"
	"testing"
)

func TestReservationStatusRoundTrip(t *testing.T) {
	s := ReservationStatus{
		Generation: 7, Type: ResvWriteExclusiveRegOnly, PTPLS: true, Registrants: 2,
		Controllers: []RegisteredController{
			{CNTLID: 0xffff, Holder: true, HostID: [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, RKEY: 0xdead},
			{CNTLID: 3, HostID: [16]byte{0xa, 0xb, 0xc, 0xd, 0xe, 0xf, 0x10, 0x11}, RKEY: 1},
		},
	}
	for _, tt := range []struct {
		eds  bool
		size int
	}{{true, ResvStatusExtHeaderSize + 2*ResvRegCtrlExtSize}, {false, ResvStatusHeaderSize + 2*ResvRegCtrlSize}} {
		b := s.AppendBinary(nil, tt.eds)
		if len(b) != tt.size {
			t.Fatalf("eds %v: %d bytes, want %d", tt.eds, len(b), tt.size)
		}
		got, err := ParseReservationStatus(b, tt.eds)
		if err != nil {
			t.Fatal(err)
		}
		want := s
		if !tt.eds {
			// The 64-bit layout keeps the first 8 bytes of host IDs.
			want.Controllers = append([]RegisteredController(nil), s.Controllers...)
			for i := range want.Controllers {
				clear(want.Controllers[i].HostID[8:])
			}
		}
		if got.Generation != want.Generation || got.Type != want.Type || got.PTPLS != want.PTPLS ||
			got.Registrants != want.Registrants || len(got.Controllers) != 2 ||
			got.Controllers[0] != want.Controllers[0] || got.Controllers[1] != want.Controllers[1] {
			t.Fatalf("eds %v: got %+v, want %+v", tt.eds, got, want)
		}
		// Fields at their spec offsets.
		if b[4] != 3 || b[5] != 2 || b[9] != 1 {
			t.Fatalf("eds %v: header % x", tt.eds, b[:10])
		}
		// A short buffer: REGCTL says 2, one is decoded.
		short, err := ParseReservationStatus(b[:len(b)-1], tt.eds)
		if err != nil || short.Registrants != 2 || len(short.Controllers) != 1 {
			t.Fatalf("eds %v short: %+v %v", tt.eds, short, err)
		}
	}
	// Extended layout offsets: RKEY at 8, HOSTID at 16 of the entry.
	b := s.AppendBinary(nil, true)
	e := b[ResvStatusExtHeaderSize:]
	if e[2] != 1 || e[8] != 0xad || e[16] != 1 || e[31] != 16 {
		t.Fatalf("extended entry % x", e[:32])
	}
	if _, err := ParseReservationStatus(b[:10], false); !errors.Is(err, ErrTruncated) {
		t.Fatalf("short header: %v", err)
	}
}

func TestReservationCommandFields(t *testing.T) {
	var b [64]byte
	c := ReservationCommand{SQE: SQE(b[:])}
	c.SetAction(ResvPreemptAndAbort)
	c.SetIEKEY(true)
	c.SetRTYPE(ResvExclusiveAccessAllRegs)
	c.SetCPTPL(CPTPLSet)
	if c.CDW10() != 2|1<<3|6<<8|3<<30 {
		t.Fatalf("CDW10 %#x", c.CDW10())
	}
	if c.Action() != ResvPreemptAndAbort || !c.IEKEY() || c.RTYPE() != ResvExclusiveAccessAllRegs || c.CPTPL() != CPTPLSet {
		t.Fatal("fields do not read back")
	}
	r := ReservationReportCommand{SQE: SQE(b[:])}
	r.SetLength(4096)
	r.SetEDS(true)
	if r.CDW10() != 1023 || r.Length() != 4096 || !r.EDS() {
		t.Fatalf("report CDW10 %d", r.CDW10())
	}
	d := ReservationData(make([]byte, 16))
	d.SetCRKEY(1)
	d.SetNRKEY(2)
	if d.CRKEY() != 1 || d.PRKEY() != 2 || !bytes.Equal(d[8:9], []byte{2}) {
		t.Fatal("data keys")
	}
}

func TestResvNotificationLog(t *testing.T) {
	b := make([]byte, ResvNotificationLogSize)
	l := ResvNotificationLog(b)
	l.SetCount(9)
	l.SetType(ResvNotifReservationReleased)
	l.SetAvailable(3)
	l.SetNSID(5)
	got, err := ParseResvNotificationLog(b)
	if err != nil || got.Count() != 9 || got.Type() != ResvNotifReservationReleased || got.Available() != 3 || got.NSID() != 5 {
		t.Fatalf("%v %v", got, err)
	}
	if b[8] != 2 || b[9] != 3 || b[12] != 5 {
		t.Fatalf("offsets % x", b[:16])
	}
	if _, err := ParseResvNotificationLog(b[:63]); !errors.Is(err, ErrTruncated) {
		t.Fatal(err)
	}
}

func FuzzParseReservationStatus(f *testing.F) {
	s := ReservationStatus{Type: 1, Registrants: 1, Controllers: []RegisteredController{{RKEY: 1}}}
	f.Add(s.AppendBinary(nil, true), true)
	f.Add(s.AppendBinary(nil, false), false)
	f.Fuzz(func(t *testing.T, b []byte, eds bool) {
		st, err := ParseReservationStatus(b, eds)
		if err != nil {
			return
		}
		if len(st.Controllers) > st.Registrants {
			t.Fatalf("%d controllers, REGCTL %d", len(st.Controllers), st.Registrants)
		}
		// Re-encoding what was decoded gives the same prefix, but for
		// reserved bytes.
		st.Registrants = len(st.Controllers)
		again, err := ParseReservationStatus(st.AppendBinary(nil, eds), eds)
		if err != nil || len(again.Controllers) != len(st.Controllers) {
			t.Fatalf("re-decode: %v", err)
		}
		for i := range st.Controllers {
			if again.Controllers[i] != st.Controllers[i] {
				t.Fatalf("entry %d: %+v != %+v", i, again.Controllers[i], st.Controllers[i])
			}
		}
	})
}

func FuzzParseResvNotificationLog(f *testing.F) {
	f.Add(make([]byte, ResvNotificationLogSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := ParseResvNotificationLog(b)
		if err != nil {
			return
		}
		_ = l.Type().String()
		_, _, _ = l.Count(), l.Available(), l.NSID()
	})
}
