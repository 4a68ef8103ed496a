package hostcli

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/soft"
)

// TestSoftTOSPlumbing: the soft device openRDMA opens for connect -T N
// (and for no -T) connects QPs whose address vector has traffic class N
// (0), and the target's QP accepted from that REQ has it too, as with
// Linux's rdma_cm; the device sends it as the IP TOS (rdma/soft
// TestTrafficClassOnWire, fabrics/rdma TestSoftTOS).
func TestSoftTOSPlumbing(t *testing.T) {
	for i, tc := range []struct {
		name string
		flag int
		want uint8
	}{{"-T 104", 104, 104}, {"default", -1, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			target := netip.AddrFrom4([4]byte{127, 0, 94, byte(1 + 2*i)})
			host := netip.AddrFrom4([4]byte{127, 0, 94, byte(2 + 2*i)})
			tdev, err := soft.Open(soft.Config{Addr: target})
			if errors.Is(err, syscall.EPERM) || errors.Is(err, os.ErrPermission) {
				t.Skipf("soft device: %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer tdev.Close()
			a := connectArgs{Transport: "rdma", Traddr: target.String(), Trsvcid: "4420", HostTraddr: host.String(),
				Provider: "soft", FastIOFailTmo: -1, TOS: tc.flag}
			hdev, err := openRDMA(a, target, hclog.NewNullLogger())
			if err != nil {
				t.Fatal(err)
			}
			defer hdev.Close()

			tcm, err := tdev.ConnManager()
			if err != nil {
				t.Fatal(err)
			}
			l, err := tcm.Listen(4420)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			accepted := make(chan rdma.Conn, 1)
			go func() {
				defer close(accepted)
				req, err := l.Next(ctx)
				if err != nil {
					return
				}
				if c, err := req.Accept(ctx, newRCQP(t, tdev), nil, rdma.ConnParam{ResponderResources: 1, InitiatorDepth: 1}); err == nil {
					accepted <- c
				}
			}()
			hcm, err := hdev.ConnManager()
			if err != nil {
				t.Fatal(err)
			}
			hc, err := hcm.Connect(ctx, target, 4420, newRCQP(t, hdev), nil, rdma.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7})
			if err != nil {
				t.Fatal(err)
			}
			tcn, ok := <-accepted
			if !ok {
				t.Fatal("the target accepted no connection")
			}
			for side, c := range map[string]rdma.Conn{"host": hc, "target": tcn} {
				var attr rdma.QPAttr
				if err := c.QP().Query(&attr); err != nil {
					t.Fatal(err)
				}
				if attr.AH.TrafficClass != tc.want {
					t.Errorf("%s QP: traffic class %d, want %d", side, attr.AH.TrafficClass, tc.want)
				}
			}
		})
	}
}

// newRCQP creates an RC QP (with its PD and CQ) on d.
func newRCQP(t *testing.T, d rdma.Device) rdma.QP {
	t.Helper()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(&rdma.QPInitAttr{Type: rdma.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: rdma.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return qp
}
