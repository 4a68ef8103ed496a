package provider

import (
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/ibverbs"
	"github.com/nvmeof/nvmeof/rdma/soft"
)

// checkCase is a case of TestCheck.
type checkCase struct {
	name, provider, device string
	want                   error // nil: accepted
	wantText               string
}

func TestCheck(t *testing.T) {
	tests := []checkCase{
		{name: "soft", provider: Soft},
		{name: "auto", provider: Auto},
		{name: "empty is auto", provider: ""},
		{name: "unknown", provider: "hw", want: ErrUnknown, wantText: `unknown RDMA provider "hw" (want auto, soft or ibverbs)`},
		{name: "case matters", provider: "Soft", want: ErrUnknown},
		{name: "soft with a device", provider: Soft, device: "mlx5_0", want: ErrDeviceWithSoft, wantText: `device "mlx5_0"`},
	}
	if ibverbs.Built {
		tests = append(tests,
			checkCase{name: "ibverbs", provider: IBVerbs},
			checkCase{name: "auto with a device", provider: Auto, device: "rxe0"})
	} else {
		tests = append(tests,
			checkCase{name: "ibverbs not built", provider: IBVerbs, want: ibverbs.ErrNotBuilt, wantText: "-tags ibverbs"},
			checkCase{name: "auto with a device, ibverbs not built", provider: Auto, device: "rxe0", want: ibverbs.ErrNotBuilt, wantText: `device "rxe0" needs the ibverbs provider`})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(tc.provider, tc.device)
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("Check(%q, %q) = %v, want nil", tc.provider, tc.device, err)
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("Check(%q, %q) = %v, want an error wrapping %v", tc.provider, tc.device, err, tc.want)
			case err != nil && strings.Contains(err.Error(), "\n"):
				t.Errorf("error is not one line: %q", err)
			case err != nil && !strings.Contains(err.Error(), tc.wantText):
				t.Errorf("error %q lacks %q", err, tc.wantText)
			}
			// Open and Resolve refuse what Check refuses, before opening anything.
			if tc.want != nil {
				if _, err := Resolve(Config{Provider: tc.provider, Device: tc.device, Addr: netip.MustParseAddr("127.77.9.1")}); !errors.Is(err, tc.want) {
					t.Errorf("Resolve: %v, want %v", err, tc.want)
				}
				if d, err := Open(Config{Provider: tc.provider, Device: tc.device, Addr: netip.MustParseAddr("127.77.9.1")}); !errors.Is(err, tc.want) {
					if d != nil {
						d.Close()
					}
					t.Errorf("Open: %v, want %v", err, tc.want)
				}
			}
		})
	}
}

func TestBuilt(t *testing.T) {
	got := Built()
	if !slices.Contains(got, Soft) {
		t.Errorf("Built() = %v lacks soft", got)
	}
	if slices.Contains(got, IBVerbs) != ibverbs.Built {
		t.Errorf("Built() = %v, ibverbs.Built = %t", got, ibverbs.Built)
	}
	for _, n := range got {
		if err := Check(n, ""); err != nil {
			t.Errorf("Check(%q) of a built-in provider: %v", n, err)
		}
		if !slices.Contains(Names(), n) {
			t.Errorf("built-in %q not in Names() %v", n, Names())
		}
	}
}

// TestOpen opens soft devices on loopback, directly and through auto,
// each on its own address.
func TestOpen(t *testing.T) {
	tests := []struct {
		name     string
		cfg      Config
		wantMTU  rdma.MTU // 0: any valid
		wantName string
	}{
		{name: "soft", cfg: Config{Provider: Soft, Addr: netip.MustParseAddr("127.77.1.1")}, wantName: "soft-127.77.1.1"},
		{name: "soft with an MTU cap", cfg: Config{Provider: Soft, Addr: netip.MustParseAddr("127.77.1.2"), MTU: 1024}, wantMTU: rdma.MTU1024},
		{name: "soft with a TOS it ignores", cfg: Config{Provider: Soft, Addr: netip.MustParseAddr("127.77.1.3"), TOS: 106, SetTOS: true}},
		{name: "auto on loopback", cfg: Config{Provider: Auto, Addr: netip.MustParseAddr("127.77.1.4")}},
		{name: "empty provider is auto", cfg: Config{Addr: netip.MustParseAddr("127.77.1.5")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want, err := Resolve(tc.cfg)
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if want == IBVerbs {
				t.Skipf("an RDMA device holds %s: auto picks ibverbs", tc.cfg.Addr)
			}
			if want != Soft {
				t.Fatalf("Resolve = %q, want soft", want)
			}
			dev, err := Open(tc.cfg)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer dev.Close()
			info := Describe(dev)
			if info.Provider != Soft || info.Addr != tc.cfg.Addr || !info.MTU.Valid() {
				t.Errorf("Describe = %+v", info)
			}
			if tc.wantMTU != 0 && info.MTU != tc.wantMTU {
				t.Errorf("MTU %v, want %v", info.MTU, tc.wantMTU)
			}
			if tc.wantName != "" && info.Name != tc.wantName {
				t.Errorf("name %q, want %q", info.Name, tc.wantName)
			}
			if info.PortNum() != 1 {
				t.Errorf("PortNum %d, want 1", info.PortNum())
			}
			if s := info.String(); !strings.HasPrefix(s, "soft "+dev.Name()+" MTU ") {
				t.Errorf("String() = %q", s)
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want error
	}{
		{name: "no address", cfg: Config{Provider: Soft}, want: rdma.ErrInvalidArgument},
		{name: "soft: address in use", cfg: Config{Provider: Soft, Addr: netip.MustParseAddr("127.77.2.1")}},
	}
	// The second device on an address fails: hold the first.
	first, err := Open(Config{Provider: Soft, Addr: netip.MustParseAddr("127.77.2.1")})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dev, err := Open(tc.cfg)
			if err == nil {
				dev.Close()
				t.Fatal("Open succeeded")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("Open: %v, want %v", err, tc.want)
			}
			if tc.cfg.Addr.IsValid() && !strings.Contains(err.Error(), tc.cfg.Addr.String()) {
				t.Errorf("error %q does not name the address", err)
			}
		})
	}
}

func TestInfoFormat(t *testing.T) {
	tests := []struct {
		name string
		info Info
		str  string
		args []any
	}{
		{
			name: "ibverbs",
			info: Info{Provider: IBVerbs, Name: "mlx5_0", Port: 1, GIDIndex: 3, GIDType: "RoCE v2", LinkLayer: "Ethernet", Netdev: "ens1f0", MTU: rdma.MTU4096},
			str:  "ibverbs mlx5_0 port 1 GID index 3 (RoCE v2) MTU 4096 Ethernet (netdev ens1f0)",
			args: []any{"provider", "ibverbs", "device", "mlx5_0", "device_port", 1, "gid_index", 3, "gid_type", "RoCE v2", "mtu", "4096", "link_layer", "Ethernet", "netdev", "ens1f0"},
		},
		{
			name: "soft",
			info: Info{Provider: Soft, Name: "soft-127.0.0.1", MTU: rdma.MTU1024},
			str:  "soft soft-127.0.0.1 MTU 1024",
			args: []any{"provider", "soft", "device", "soft-127.0.0.1", "mtu", "1024"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if s := tc.info.String(); s != tc.str {
				t.Errorf("String() = %q, want %q", s, tc.str)
			}
			if a := tc.info.LogArgs(); !slices.Equal(a, tc.args) {
				t.Errorf("LogArgs() = %v, want %v", a, tc.args)
			}
		})
	}
}

// TestOpenShareWithoutPermission: a shared soft device whose share
// directory cannot be written (a user without privilege: /run/soft-roce is
// root's) opens unshared, as one refused its steering program does; the
// fio engine's shared host device failed with "shared device lock:
// permission denied" for a developer's go test. /sys/kernel refuses new
// files to root too.
func TestOpenShareWithoutPermission(t *testing.T) {
	dir := "/sys/kernel"
	if f, err := os.OpenFile(filepath.Join(dir, "127.77.3.1-4791.lock"), os.O_RDWR|os.O_CREATE, 0o600); !errors.Is(err, fs.ErrPermission) {
		if err == nil {
			f.Close()
		}
		t.Skipf("%s takes new files here (%v): no share directory that refuses them", dir, err)
	}
	dev, err := Open(Config{Provider: Soft, Addr: netip.MustParseAddr("127.77.3.1"), Share: true, ShareDir: dir})
	if err != nil {
		t.Fatalf("Open with an unwritable share directory: %v", err)
	}
	defer dev.Close()
	if sd, ok := dev.(*soft.Device); !ok || sd.Shared() {
		t.Errorf("device %T shared %v, want an unshared *soft.Device", dev, ok && sd.Shared())
	}
}

// TestOpenCongestion: Config.Congestion reaches the soft device: an RC
// QP of a device opened with it runs DCQCN at the line rate configured,
// one opened without has no rate.
func TestOpenCongestion(t *testing.T) {
	for _, tc := range []struct {
		name string
		addr string
		cc   *soft.CongestionConfig
		want uint64
	}{
		{"on", "127.77.2.1", &soft.CongestionConfig{Enabled: true, LineRate: 3e9}, 3e9},
		{"off", "127.77.2.2", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev, err := Open(Config{Provider: Soft, Addr: netip.MustParseAddr(tc.addr), Congestion: tc.cc})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer dev.Close()
			if got := rcQPRate(t, dev); got != tc.want {
				t.Errorf("QP rate %d b/s, want %d", got, tc.want)
			}
		})
	}
}

// rcQPRate creates an RC QP on soft device dev and returns its DCQCN
// rate (soft.QPStats.RPRate: 0 with congestion control off).
func rcQPRate(t *testing.T, dev rdma.Device) uint64 {
	t.Helper()
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := dev.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(&rdma.QPInitAttr{Type: rdma.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: rdma.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Destroy()
	for _, s := range dev.(*soft.Device).QPStats(nil) {
		if s.QPN == qp.QPN() {
			return s.RPRate
		}
	}
	t.Fatalf("QP %d not in QPStats", qp.QPN())
	return 0
}
