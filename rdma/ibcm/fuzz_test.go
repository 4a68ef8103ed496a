package ibcm

import (
	"net/netip"
	"testing"

	"github.com/nvmeof/nvmeof/rdma/wire"
)

// FuzzDispatch feeds arbitrary MADs to a manager with a listener: no
// input may panic it.
func FuzzDispatch(f *testing.F) {
	n := newFakeNet()
	dev := n.newDev("192.0.2.2")
	m, err := New(dev, testOpts())
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		m.Destroy()
		dev.Close()
	})
	if _, err := m.Listen(4420); err != nil {
		f.Fatal(err)
	}
	src := netip.MustParseAddr("192.0.2.3")
	_, mads := goldenFrames(f)
	for _, mad := range mads {
		f.Add([]byte(mad))
	}
	for _, attr := range []wire.CMAttr{wire.CMAttrREQ, wire.CMAttrMRA, wire.CMAttrREJ, wire.CMAttrREP, wire.CMAttrRTU, wire.CMAttrDREQ, wire.CMAttrDREP, 0x99} {
		mad, _ := newCMMAD(attr, 1)
		f.Add([]byte(mad))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		mad := make([]byte, wire.MADLen)
		copy(mad, b)
		m.dispatch(src, wire.MAD(mad))
	})
}
