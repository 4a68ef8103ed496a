package nvme_test

import (
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/nvme"
)

func TestNumQueues(t *testing.T) {
	tests := []struct {
		nsq, ncq uint32
		v        uint32
		back     [2]uint32
	}{
		{1, 1, 0, [2]uint32{1, 1}},
		{128, 128, 0x007f007f, [2]uint32{128, 128}}, // nvmet's answer in the captures
		{4, 2, 0x00010003, [2]uint32{4, 2}},
		{0, 70000, 0xfffe0000, [2]uint32{1, 65535}}, // clamped
	}
	for _, tt := range tests {
		if v := nvme.MakeNumQueues(tt.nsq, tt.ncq); v != tt.v {
			t.Errorf("MakeNumQueues(%d, %d) = %#x, want %#x", tt.nsq, tt.ncq, v, tt.v)
		}
		if nsq, ncq := nvme.NumQueues(tt.v); nsq != tt.back[0] || ncq != tt.back[1] {
			t.Errorf("NumQueues(%#x) = %d, %d", tt.v, nsq, ncq)
		}
	}
}

func TestKATO(t *testing.T) {
	tests := []struct {
		d    time.Duration
		kato uint32
	}{
		{0, 0}, {-time.Second, 0}, {time.Nanosecond, 1}, {5 * time.Second, 5000}, {1500 * time.Microsecond, 2},
		{time.Duration(1 << 62), 0xffffffff},
	}
	for _, tt := range tests {
		if got := nvme.KATOFromDuration(tt.d); got != tt.kato {
			t.Errorf("KATOFromDuration(%v) = %d, want %d", tt.d, got, tt.kato)
		}
	}
	if nvme.KATODuration(120000) != 2*time.Minute {
		t.Error("KATODuration")
	}
}

func TestFeatureHelpers(t *testing.T) {
	// The kernel host's Asynchronous Event Configuration in the captures:
	// 0x80000000 to the discovery controller, 0x900 to the I/O controller.
	if nvme.AECDiscoveryLogPageChange != 0x80000000 || nvme.AECNamespaceAttribute|nvme.AECANAChange != 0x900 {
		t.Error("AEC bits")
	}
	a := nvme.Arbitration{AB: 7, LPW: 1, MPW: 2, HPW: 3}
	if a.Value() != 0x03020107 || nvme.ParseArbitration(0x03020107) != a {
		t.Errorf("Arbitration %#x", a.Value())
	}
	tt := nvme.TemperatureThreshold{TMPTH: 350, TMPSEL: 0xf, THSEL: 1}
	if tt.Value() != 0x001f015e || nvme.ParseTemperatureThreshold(0x001f015e) != tt {
		t.Errorf("Temperature Threshold %#x", tt.Value())
	}
	if nvme.PowerManagement(3, 2) != 0x43 {
		t.Error("PowerManagement")
	}
	for f, name := range map[nvme.FeatureID]string{
		nvme.FeatNumberOfQueues: "Number of Queues", nvme.FeatKeepAliveTimer: "Keep Alive Timer",
		nvme.FeatAsyncEventConfig: "Asynchronous Event Configuration", nvme.FeatHostIdentifier: "Host Identifier",
		nvme.FeatVolatileWriteCache: "Volatile Write Cache", 0x70: "Feature 0x70", 0xc5: "Vendor Specific Feature 0xc5",
	} {
		if f.String() != name {
			t.Errorf("%#x: %q", uint8(f), f.String())
		}
	}
}

func TestAsyncEvents(t *testing.T) {
	tests := []struct {
		e    nvme.AsyncEvent
		dw0  uint32
		typ  nvme.AsyncEventType
		info uint8
		lid  nvme.LogPageID
		s    string
	}{
		{nvme.AENNamespaceChanged, 0x00040002, nvme.AsyncEventNotice, 0, nvme.LIDChangedNSList, "Notice info 0x00 log 0x04 (Changed Namespace List)"},
		{nvme.AENANAChange, 0x000c0302, nvme.AsyncEventNotice, 3, nvme.LIDANA, "Notice info 0x03 log 0x0c (Asymmetric Namespace Access)"},
		{nvme.AENDiscoveryChange, 0x0070f002, nvme.AsyncEventNotice, 0xf0, nvme.LIDDiscovery, "Notice info 0xf0 log 0x70 (Discovery)"},
		{nvme.AENFirmwareActivation, 0x00030102, nvme.AsyncEventNotice, 1, nvme.LIDFirmwareSlot, "Notice info 0x01 log 0x03 (Firmware Slot Information)"},
		{nvme.MakeAsyncEvent(nvme.AsyncEventSMART, nvme.AsyncSMARTTemperatureThreshold, nvme.LIDSMART), 0x00020101, nvme.AsyncEventSMART, 1, nvme.LIDSMART, "SMART / Health info 0x01 log 0x02 (SMART / Health Information)"},
	}
	for _, tt := range tests {
		if uint32(tt.e) != tt.dw0 || tt.e.Type() != tt.typ || tt.e.Info() != tt.info || tt.e.LID() != tt.lid || tt.e.String() != tt.s {
			t.Errorf("%#x: type %v info %#x lid %v %q", uint32(tt.e), tt.e.Type(), tt.e.Info(), tt.e.LID(), tt.e.String())
		}
	}
	for typ, name := range map[nvme.AsyncEventType]string{0: "Error", 1: "SMART / Health", 2: "Notice", 3: "Immediate", 6: "I/O Command Specific", 7: "Vendor Specific", 4: "AsyncEventType(4)"} {
		if typ.String() != name {
			t.Errorf("%d: %q", typ, typ.String())
		}
	}
}
