package nvme_test

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/nvmeof/nvmeof/nvme"
)

// A layout lists the members of a C structure in order, with their sizes,
// as Linux and libnvme declare them (include/linux/nvme.h, libnvme's
// src/nvme/types.h). Offsets are summed here, independently of the
// package's offset constants. method is the accessor's name, "" for
// reserved or separately tested members.
type layoutField struct {
	method string
	size   int
}

// checkLayout sets every field through its Set method on a zeroed view,
// checks the bytes land at the summed offset in little-endian order and
// nowhere else, and reads the value back.
func checkLayout(t *testing.T, newView func() reflect.Value, total int, layout []layoutField) {
	t.Helper()
	off := 0
	for _, f := range layout {
		if f.method != "" {
			view := newView()
			set := view.MethodByName("Set" + f.method)
			get := view.MethodByName(f.method)
			if !set.IsValid() || !get.IsValid() {
				t.Errorf("%s: no %s/Set%s methods", view.Type(), f.method, f.method)
				off += f.size
				continue
			}
			arg := set.Type().In(0)
			val, image := patternValue(arg, f.size)
			if val.IsValid() {
				set.Call([]reflect.Value{val})
				want := make([]byte, total)
				copy(want[off:], image)
				if got := view.Bytes(); !bytes.Equal(got, want) {
					t.Errorf("%s.Set%s: bytes at %d..%d are % x, want % x (or written elsewhere)", view.Type(), f.method, off, off+f.size, got[off:off+f.size], image)
					for i := range got {
						if got[i] != want[i] {
							t.Errorf("  first difference at byte %d", i)
							break
						}
					}
				}
				if out := get.Call(nil)[0]; !reflect.DeepEqual(out.Interface(), val.Interface()) {
					t.Errorf("%s.%s() = %v after setting %v", view.Type(), f.method, out, val)
				}
			} else {
				t.Errorf("%s.Set%s: cannot make a %v of %d bytes", view.Type(), f.method, arg, f.size)
			}
		}
		off += f.size
	}
	if off != total {
		t.Errorf("layout sums to %d bytes, want %d", off, total)
	}
}

// patternValue returns a value of type typ whose wire image is size bytes
// 0x11, 0x22, ... (little-endian for integers), and that image.
func patternValue(typ reflect.Type, size int) (reflect.Value, []byte) {
	image := make([]byte, size)
	for i := range image {
		image[i] = byte(0x11 * (i + 1))
		if image[i] == 0 {
			image[i] = 0x5a
		}
	}
	var v uint64
	for i := size - 1; i >= 0 && i < 8; i-- {
		v = v<<8 | uint64(image[i])
	}
	switch {
	case typ == reflect.TypeOf(nvme.Uint128{}) && size == 16:
		var lo, hi uint64
		for i := 7; i >= 0; i-- {
			lo = lo<<8 | uint64(image[i])
			hi = hi<<8 | uint64(image[8+i])
		}
		return reflect.ValueOf(nvme.Uint128{Lo: lo, Hi: hi}), image
	case typ.Kind() == reflect.Array && typ.Elem().Kind() == reflect.Uint8 && typ.Len() == size:
		a := reflect.New(typ).Elem()
		reflect.Copy(a, reflect.ValueOf(image))
		return a, image
	case typ.Kind() >= reflect.Uint8 && typ.Kind() <= reflect.Uint64 && size <= int(typ.Size()):
		return reflect.ValueOf(v).Convert(typ), image
	}
	return reflect.Value{}, nil
}

func TestIdentifyControllerLayout(t *testing.T) {
	layout := []layoutField{
		{"VID", 2}, {"SSVID", 2}, {"", 20}, {"", 40}, {"", 8}, // SN, MN, FR: TestIdentifyControllerStrings
		{"RAB", 1}, {"IEEE", 3}, {"CMIC", 1}, {"MDTS", 1}, {"CNTLID", 2}, {"VER", 4}, {"RTD3R", 4},
		{"RTD3E", 4}, {"OAES", 4}, {"CTRATT", 4}, {"RRLS", 2}, {"", 9}, {"CNTRLTYPE", 1}, {"FGUID", 16},
		{"CRDT1", 2}, {"CRDT2", 2}, {"CRDT3", 2}, {"", 119}, {"NVMSR", 1}, {"VWCI", 1}, {"MEC", 1},
		{"OACS", 2}, {"ACL", 1}, {"AERL", 1}, {"FRMW", 1}, {"LPA", 1}, {"ELPE", 1}, {"NPSS", 1},
		{"AVSCC", 1}, {"APSTA", 1}, {"WCTEMP", 2}, {"CCTEMP", 2}, {"MTFA", 2}, {"HMPRE", 4}, {"HMMIN", 4},
		{"TNVMCAP", 16}, {"UNVMCAP", 16}, {"RPMBS", 4}, {"EDSTT", 2}, {"DSTO", 1}, {"FWUG", 1}, {"KAS", 2},
		{"HCTMA", 2}, {"MNTMT", 2}, {"MXTMT", 2}, {"SANICAP", 4}, {"HMMINDS", 4}, {"HMMAXD", 2},
		{"NSETIDMAX", 2}, {"ENDGIDMAX", 2}, {"ANATT", 1}, {"ANACAP", 1}, {"ANAGRPMAX", 4}, {"NANAGRPID", 4},
		{"PELS", 4}, {"DOMAINID", 2}, {"", 10}, {"MEGCAP", 16}, {"", 128},
		{"SQES", 1}, {"CQES", 1}, {"MAXCMD", 2}, {"NN", 4}, {"ONCS", 2}, {"FUSES", 2}, {"FNA", 1}, {"VWC", 1},
		{"AWUN", 2}, {"AWUPF", 2}, {"NVSCC", 1}, {"NWPC", 1}, {"ACWU", 2}, {"OCFS", 2}, {"SGLS", 4},
		{"MNAN", 4}, {"MAXDNA", 16}, {"MAXCNA", 4}, {"", 204}, {"", 256}, {"", 768}, // SUBNQN tested apart
		{"IOCCSZ", 4}, {"IORCSZ", 4}, {"ICDOFF", 2}, {"FCATT", 1}, {"MSDBD", 1}, {"OFCS", 2}, {"", 242},
		{"", 32 * 32}, {"", 1024}, // power state descriptors, vendor specific
	}
	checkLayout(t, func() reflect.Value { return reflect.ValueOf(nvme.NewIdentifyController()) }, nvme.IdentifyDataSize, layout)
}

func TestIdentifyNamespaceLayout(t *testing.T) {
	layout := []layoutField{
		{"NSZE", 8}, {"NCAP", 8}, {"NUSE", 8}, {"NSFEAT", 1}, {"NLBAF", 1}, {"FLBAS", 1}, {"MC", 1},
		{"DPC", 1}, {"DPS", 1}, {"NMIC", 1}, {"RESCAP", 1}, {"FPI", 1}, {"DLFEAT", 1}, {"NAWUN", 2},
		{"NAWUPF", 2}, {"NACWU", 2}, {"NABSN", 2}, {"NABO", 2}, {"NABSPF", 2}, {"NOIOB", 2}, {"NVMCAP", 16},
		{"NPWG", 2}, {"NPWA", 2}, {"NPDG", 2}, {"NPDA", 2}, {"NOWS", 2}, {"MSSRL", 2}, {"MCL", 4},
		{"MSRC", 1}, {"NULBAF", 1}, {"", 10}, {"ANAGRPID", 4}, {"", 3}, {"NSATTR", 1}, {"NVMSETID", 2},
		{"ENDGID", 2}, {"NGUID", 16}, {"EUI64", 8}, {"", 64 * 4}, {"", 3712},
	}
	checkLayout(t, func() reflect.Value { return reflect.ValueOf(nvme.NewIdentifyNamespace()) }, nvme.IdentifyDataSize, layout)
}

func TestSMARTLogLayout(t *testing.T) {
	layout := []layoutField{
		{"CriticalWarning", 1}, {"CompositeTemperature", 2}, {"AvailableSpare", 1}, {"AvailableSpareThreshold", 1},
		{"PercentageUsed", 1}, {"EnduranceGroupCriticalWarning", 1}, {"", 25},
		{"DataUnitsRead", 16}, {"DataUnitsWritten", 16}, {"HostReadCommands", 16}, {"HostWriteCommands", 16},
		{"ControllerBusyTime", 16}, {"PowerCycles", 16}, {"PowerOnHours", 16}, {"UnsafeShutdowns", 16},
		{"MediaErrors", 16}, {"ErrorLogEntries", 16}, {"WarningTemperatureTime", 4}, {"CriticalTemperatureTime", 4},
		{"", 16}, // temperature sensors: TestSMARTLog
		{"ThermalMgmtT1TransitionCount", 4}, {"ThermalMgmtT2TransitionCount", 4},
		{"ThermalMgmtT1TotalTime", 4}, {"ThermalMgmtT2TotalTime", 4}, {"", 280},
	}
	checkLayout(t, func() reflect.Value { return reflect.ValueOf(nvme.SMARTLog(make([]byte, nvme.SMARTLogSize))) }, nvme.SMARTLogSize, layout)
}

func TestErrorLogEntryLayout(t *testing.T) {
	layout := []layoutField{
		{"ErrorCount", 8}, {"SQID", 2}, {"CID", 2}, {"StatusRaw", 2}, {"ParameterErrorLocation", 2},
		{"LBA", 8}, {"NSID", 4}, {"VendorSpecificInfo", 1}, {"TRTYPE", 1}, {"", 2},
		{"CommandSpecificInfo", 8}, {"TransportSpecificInfo", 2}, {"", 22},
	}
	checkLayout(t, func() reflect.Value { return reflect.ValueOf(nvme.ErrorLogEntry(make([]byte, nvme.ErrorLogEntrySize))) }, nvme.ErrorLogEntrySize, layout)
}

func TestPowerStateDescriptorLayout(t *testing.T) {
	layout := []layoutField{
		{"MP", 2}, {"", 1}, {"Flags", 1}, {"ENLAT", 4}, {"EXLAT", 4}, {"", 4}, {"IDLP", 2}, {"", 2},
		{"ACTP", 2}, {"", 10},
	}
	checkLayout(t, func() reflect.Value {
		return reflect.ValueOf(nvme.NewIdentifyController().PowerState(0))
	}, 32, layout)
}
