package initiator

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// The host must survive whatever a target sends: these fuzz targets feed
// arbitrary Identify data, namespace lists and discovery log pages to
// Connect, the namespace scan and Discover. Errors are fine; panics and
// hangs are not.

func FuzzIdentify(f *testing.F) {
	ns := nvme.NewIdentifyNamespace()
	ns.SetNSZE(2048)
	ns.SetNCAP(2048)
	ns.SetLBAF(0, nvme.LBAFormat{LBADS: 12})
	ctrl := nvme.NewIdentifyController()
	ctrl.SetKAS(1)
	ctrl.SetMDTS(1)
	ctrl.SetONCS(0xffff)
	f.Add([]byte(ctrl), []byte(ns), []byte{1, 0, 0, 0, 2, 0, 0, 0})
	f.Add([]byte{}, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 1}, []byte{5, 0, 0, 0, 3})
	big := nvme.NewIdentifyNamespace()
	big.SetNSZE(1 << 62)
	big.SetNCAP(1)
	big.SetFLBAS(0x4f)
	f.Add([]byte(nil), []byte(big), []byte(nil))
	f.Fuzz(func(t *testing.T, idCtrl, idNS, nsList []byte) {
		ft := newFakeTarget(t, 1<<20)
		if len(idCtrl) > 0 {
			ft.rawIDCtrl = idCtrl
		}
		ft.rawIDNS = append([]byte{}, idNS...)
		if len(nsList) > 0 {
			ft.rawNSList = nsList
		}
		o := testOpts()
		o.CommandTimeout = time.Second
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
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

func FuzzDiscoveryLog(f *testing.F) {
	l := fabrics.DiscoveryLog{GenCtr: 3, Entries: []fabrics.DiscoveryRecord{{TRType: fabrics.TRTypeTCP, SubType: fabrics.SubTypeNVM, TRADDR: "192.0.2.1", TRSVCID: "4420", SubNQN: fakeNQN}}}
	page, _ := l.Encode()
	f.Add(page)
	f.Add(page[:1024])
	f.Add([]byte{})
	hdr := append([]byte{}, page[:1024]...)
	hdr[8] = 0xff // NUMREC far beyond the page
	f.Add(hdr)
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) >= 16 && binary.LittleEndian.Uint64(b[8:]) > 64 {
			// Keep executions fast: the host reads NUMREC records (up
			// to maxDiscoveryRecords), which is legitimate but slow.
			b = append([]byte{}, b...)
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
