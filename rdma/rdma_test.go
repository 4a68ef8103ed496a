package rdma

import (
	"errors"
	"net/netip"
	"testing"
	"time"
)

func TestMTU(t *testing.T) {
	tests := []struct {
		m     MTU
		bytes int
	}{{MTU256, 256}, {MTU512, 512}, {MTU1024, 1024}, {MTU2048, 2048}, {MTU4096, 4096}, {0, 0}, {6, 0}}
	for _, tc := range tests {
		if got := tc.m.Bytes(); got != tc.bytes {
			t.Errorf("MTU(%d).Bytes() = %d, want %d", tc.m, got, tc.bytes)
		}
		if tc.m.Valid() != (tc.bytes != 0) {
			t.Errorf("MTU(%d).Valid() = %v", tc.m, tc.m.Valid())
		}
	}
	from := []struct {
		n  int
		m  MTU
		ok bool
	}{{255, 0, false}, {256, MTU256, true}, {1404, MTU1024, true}, {4096, MTU4096, true}, {65000, MTU4096, true}}
	for _, tc := range from {
		if m, ok := MTUFromBytes(tc.n); m != tc.m || ok != tc.ok {
			t.Errorf("MTUFromBytes(%d) = %v, %v; want %v, %v", tc.n, m, ok, tc.m, tc.ok)
		}
	}
}

func TestTimers(t *testing.T) {
	tests := []struct {
		name string
		got  time.Duration
		want time.Duration
	}{
		{"timeout 0", TimeoutDuration(0), 0},
		{"timeout 1", TimeoutDuration(1), 8192 * time.Nanosecond},
		{"timeout 14", TimeoutDuration(14), 67108864 * time.Nanosecond},
		{"timeout 19", TimeoutDuration(19), 2147483648 * time.Nanosecond},
		{"RNR 0", RNRTimerDuration(0), 655360 * time.Microsecond},
		{"RNR 1", RNRTimerDuration(1), 10 * time.Microsecond},
		{"RNR 12", RNRTimerDuration(12), 640 * time.Microsecond},
		{"RNR 31", RNRTimerDuration(31), 491520 * time.Microsecond},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

func TestGRHAddrs(t *testing.T) {
	v4 := make([]byte, GRHLen)
	v4[20] = 0x45
	copy(v4[32:], []byte{192, 0, 2, 3})
	copy(v4[36:], []byte{192, 0, 2, 1})
	v6 := make([]byte, GRHLen)
	v6[0] = 0x60
	s6, d6 := netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("::ffff:10.0.0.1")
	copy(v6[8:], s6.AsSlice())
	copy(v6[24:], d6.AsSlice())
	tests := []struct {
		name     string
		grh      []byte
		src, dst string
		err      bool
	}{
		{"IPv4", v4, "192.0.2.3", "192.0.2.1", false},
		{"IPv6", v6, "2001:db8::1", "10.0.0.1", false},
		{"short", v4[:39], "", "", true},
		{"bad version", make([]byte, GRHLen), "", "", true},
	}
	for _, tc := range tests {
		src, dst, err := GRHAddrs(tc.grh)
		if tc.err {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("%s: error %v", tc.name, err)
			}
			continue
		}
		if err != nil || src.String() != tc.src || dst.String() != tc.dst {
			t.Errorf("%s: %v %v %v", tc.name, src, dst, err)
		}
	}
}

func TestNames(t *testing.T) {
	tests := []struct{ got, want string }{
		{Success.String(), "success"},
		{WRFlushError.String(), "Work Request Flushed Error"},
		{RetryExceeded.String(), "transport retry counter exceeded"},
		{RemoteAccessError.String(), "remote access error"},
		{WCStatus(99).String(), "WCStatus(99)"},
		{QPSRTS.String(), "RTS"},
		{QPTypeGSI.String(), "GSI"},
		{WRSendWithInv.String(), "SEND_WITH_INV"},
		{WCRecvRDMAWithImm.String(), "RECV_RDMA_WITH_IMM"},
		{(AccessLocalWrite | AccessRemoteRead).String(), "LocalWrite|RemoteRead"},
		{EventTimeWaitExit.String(), "RDMA_CM_EVENT_TIMEWAIT_EXIT"},
		{RejectConsumer.String(), "consumer defined"},
		{MTU1024.String(), "1024"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	if ServiceID(4420) != 0x0000000001061144 {
		t.Errorf("ServiceID(4420) = %#x", ServiceID(4420))
	}
	wc := WorkCompletion{Status: RemoteAccessError, WRID: 7, QPN: 0x11}
	var we *WCError
	if err := wc.Err(); !errors.As(err, &we) || we.Status != RemoteAccessError {
		t.Errorf("WorkCompletion.Err: %v", err)
	}
	if err := (&WorkCompletion{}).Err(); err != nil {
		t.Errorf("success Err: %v", err)
	}
	pe := &PostError{Index: 2, Err: ErrQueueFull}
	if !errors.Is(pe, ErrQueueFull) {
		t.Error("PostError does not unwrap")
	}
}

// TestIncRKey: the key byte advances and wraps; the index bits stay.
func TestIncRKey(t *testing.T) {
	for _, c := range []struct{ in, want uint32 }{
		{0x00001200, 0x00001201},
		{0x123456fe, 0x123456ff},
		{0x123456ff, 0x12345600},
		{0xffffffff, 0xffffff00},
	} {
		if got := IncRKey(c.in); got != c.want {
			t.Errorf("IncRKey(%#x) = %#x, want %#x", c.in, got, c.want)
		}
	}
	if got := (AccessLocalWrite | AccessMWBind | 1<<9).String(); got != "LocalWrite|MWBind|0x200" {
		t.Errorf("Access.String = %q", got)
	}
}
