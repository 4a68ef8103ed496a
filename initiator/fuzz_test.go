package initiator

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// The host must survive whatever a target sends: these fuzz targets feed
// arbitrary Identify data, namespace lists and discovery log pages to
// Connect, the namespace scan and Discover. Errors are fine; panics and
// hangs are not.

// Seeds come from a real session (testdata/capture: the Identify data,
// active namespace list and discovery log page Linux's nvmet-tcp sent in
// ../shared/testdata/pcap/kernel-nvme-tcp.pcapng, cut out of its C2H Data
// PDUs) and from structures built here. The fuzz inputs are short edits of
// those structures rather than raw 4 KiB pages: a page that fails its
// first check never reaches the host's later ones, and the fuzzing engine
// stalls on long []byte inputs (it minimizes each new one by trying to cut
// every run of bytes, quadratic in the length, for up to a minute).

// fuzzCommandTimeout bounds each command of a fuzz execution.
const fuzzCommandTimeout = 250 * time.Millisecond

// captured reads a seed structure cut out of the kernel capture.
func captured(f *testing.F, name string) []byte {
	f.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "capture", name))
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// patch returns a copy of base with edits applied: each 3 bytes of edits
// set the byte at the offset of the first two (little-endian, modulo
// len(base)) to the third.
func patch(base, edits []byte) []byte {
	b := append([]byte(nil), base...)
	if len(b) == 0 {
		return b
	}
	for ; len(edits) >= 3; edits = edits[3:] {
		b[int(binary.LittleEndian.Uint16(edits))%len(b)] = edits[2]
	}
	return b
}

// fuzzIDs returns an active namespace list of the NSIDs in ids (4 bytes
// each, little-endian), nil when there are none.
func fuzzIDs(ids []byte) []byte {
	if len(ids) < 4 {
		return nil
	}
	b := make([]byte, 4096)
	copy(b, ids[:len(ids)&^3])
	return b
}

func FuzzIdentify(f *testing.F) {
	ns := nvme.NewIdentifyNamespace()
	ns.SetNSZE(2048)
	ns.SetNCAP(2048)
	ns.SetLBAF(0, nvme.LBAFormat{LBADS: 12})
	ctrl := nvme.NewIdentifyController()
	ctrl.SetKAS(1)
	ctrl.SetMDTS(1)
	ctrl.SetONCS(0xffff)
	big := nvme.NewIdentifyNamespace()
	big.SetNSZE(1 << 62)
	big.SetNCAP(1)
	big.SetFLBAS(0x4f)
	ctrls := [][]byte{captured(f, "idctrl-nvm.bin"), ctrl, captured(f, "idctrl-discovery.bin")}
	nss := [][]byte{captured(f, "idns.bin"), ns, big}
	nsList := captured(f, "nslist.bin")

	// Edits at offsets the host reads: MDTS (77), CNTLID (78), the
	// number of namespaces (516), SGLS (536), IOCCSZ (1792); FLBAS (26),
	// NLBAF (25), LBAF 0 (128); and the list's NSIDs.
	f.Add(uint8(0), []byte{}, []byte{}, []byte{})
	f.Add(uint8(1), []byte{77, 0, 0}, []byte{}, []byte{1, 0, 0, 0, 2, 0, 0, 0})
	f.Add(uint8(0), []byte{77, 0, 20, 4, 2, 0}, []byte{26, 0, 0x0f, 130, 0, 30}, []byte{})
	f.Add(uint8(4), []byte{24, 2, 0, 0, 7, 0}, []byte{25, 0, 63, 0, 0, 0xff, 7, 0, 0xff}, []byte{0xff, 0xff, 0xff, 0xff, 5, 0, 0, 0})
	f.Add(uint8(2), []byte{}, []byte{8, 0, 0}, []byte{})
	f.Add(uint8(8), []byte{}, []byte{}, []byte{0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, pick uint8, ctrlEdits, nsEdits, ids []byte) {
		ft := newFakeTarget(t, 1<<20)
		ft.rawIDCtrl = patch(ctrls[int(pick&3)%len(ctrls)], ctrlEdits)
		ft.rawIDNS = patch(nss[int(pick>>2&3)%len(nss)], nsEdits)
		if l := fuzzIDs(ids); l != nil {
			ft.rawNSList = l
		} else if pick&0x10 == 0 {
			ft.rawNSList = nsList
		}
		o := testOpts()
		// The fake target answers in microseconds: a command it leaves
		// unanswered should not stall the fuzzer for long.
		o.CommandTimeout = fuzzCommandTimeout
		ctx, cancel := context.WithTimeout(context.Background(), 10*fuzzCommandTimeout)
		defer cancel()
		c, err := Connect(ctx, ft.dialer(), ft.addr, o)
		if err != nil {
			return
		}
		defer c.Close()
		for _, ns := range c.Namespaces() {
			buf := make([]byte, ns.BlockSize())
			_, _ = ns.ReadAt(buf, 0)
			_, _ = ns.ReadAt(buf, ns.Size()-int64(len(buf)))
			_ = ns.WriteZeroes(0, int64(len(buf)))
		}
	})
}

// FuzzDiscoveryLog feeds Discover a discovery log page: the captured one
// (two records of Linux's nvmet) or one built here, with byte edits, its
// NUMREC set to a small count and its length cut.
func FuzzDiscoveryLog(f *testing.F) {
	l := fabrics.DiscoveryLog{GenCtr: 3, Entries: []fabrics.DiscoveryRecord{{TRType: fabrics.TRTypeTCP, SubType: fabrics.SubTypeNVM, TRADDR: "192.0.2.1", TRSVCID: "4420", SubNQN: fakeNQN}}}
	built, _ := l.Encode()
	pages := [][]byte{captured(f, "disclog.bin"), built}
	// TRTYPE (1024), ADRFAM (1025), SUBTYPE (1026), TRADDR (1280),
	// TSAS (1536): of the first record.
	f.Add(uint8(0), uint8(0), uint16(0), []byte{})
	f.Add(uint8(1), uint8(0), uint16(0), []byte{})
	f.Add(uint8(0), uint8(0x80|5), uint16(0), []byte{0, 4, 3, 1, 4, 9})
	f.Add(uint8(0), uint8(0), uint16(1500), []byte{2, 4, 0xff, 0, 5, 0})
	f.Add(uint8(1), uint8(0x80|1), uint16(1024), []byte{0, 6, 0, 1, 4, 2})
	f.Fuzz(func(t *testing.T, pick, numrec uint8, cut uint16, edits []byte) {
		b := patch(pages[int(pick)%len(pages)], edits)
		if numrec&0x80 != 0 {
			// A small NUMREC: the host reads that many records (up to
			// MaxDiscoveryRecords), legitimate but slow when large.
			binary.LittleEndian.PutUint64(b[8:], uint64(numrec&0x7f)%8)
		}
		if cut != 0 {
			b = b[:int(cut)%(len(b)+1)]
		}
		if len(b) >= 16 && binary.LittleEndian.Uint64(b[8:]) > 64 {
			binary.LittleEndian.PutUint64(b[8:], uint64(b[8])%64)
		}
		ft := newFakeTarget(t, 1<<20)
		ft.rawDisc = b
		o := testOpts()
		o.SubsystemNQN = ""
		o.CommandTimeout = time.Second
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		entries, err := Discover(ctx, ft.dialer(), ft.addr, o)
		if err != nil {
			return
		}
		for _, e := range entries {
			_, _ = e.Address()
		}
	})
}
