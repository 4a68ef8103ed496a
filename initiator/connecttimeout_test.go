package initiator

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
)

// silentDialer is a target that never answers a transport connect: Dial
// returns when ctx ends, with its error, as the RDMA CM does.
type silentDialer struct{}

func (silentDialer) Dial(ctx context.Context, _ fabrics.Address, _ fabrics.QueueParams) (fabrics.HostQueue, error) {
	<-ctx.Done()
	return nil, fmt.Errorf("cm: connect: %w", ctx.Err())
}

// TestConnectTimeoutNamed: when the connect timeout of a queue (3 s)
// ends an attempt before the caller's deadline, the error says that
// timeout, not the caller's deadline (nvmeof connect --timeout 5s said
// "no answer within 5s" after 3 s); when the caller's deadline comes
// first, the error is the caller's.
func TestConnectTimeoutNamed(t *testing.T) {
	for _, tt := range []struct {
		name                  string
		deadline, connectTmo  time.Duration
		wantAfter             time.Duration
		wantConnTmo, wantCtxs bool
	}{
		{name: "connect timeout first", deadline: 5 * time.Second, connectTmo: 3 * time.Second, wantAfter: 3 * time.Second, wantConnTmo: true},
		{name: "default connect timeout", deadline: time.Minute, wantAfter: DefaultConnectTimeout, wantConnTmo: true},
		{name: "caller's deadline first", deadline: 2 * time.Second, connectTmo: 3 * time.Second, wantAfter: 2 * time.Second, wantCtxs: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), tt.deadline)
				defer cancel()
				addr := fabrics.Address{Transport: fabrics.TransportLoop, Addr: netip.MustParseAddr("127.0.0.1"), ServiceID: 4420}
				start := time.Now()
				_, err := Connect(ctx, silentDialer{}, addr, Options{SubsystemNQN: tgtNQN, HostNQN: testHostNQN, ConnectTimeout: tt.connectTmo})
				if took := time.Since(start); took != tt.wantAfter {
					t.Errorf("Connect returned after %v, want %v", took, tt.wantAfter)
				}
				var cte *ConnectTimeoutError
				if got := errors.As(err, &cte); got != tt.wantConnTmo || !errors.Is(err, ErrUnreachable) {
					t.Fatalf("error %v: *ConnectTimeoutError %v (want %v), ErrUnreachable %v (want true)", err, got, tt.wantConnTmo, errors.Is(err, ErrUnreachable))
				}
				if got := errors.Is(err, context.DeadlineExceeded); got != tt.wantCtxs {
					t.Errorf("error %v: context.DeadlineExceeded %v, want %v", err, got, tt.wantCtxs)
				}
				if tt.wantConnTmo && !strings.Contains(err.Error(), fmt.Sprintf("queue 0: no answer to the transport connect within %v", tt.wantAfter)) {
					t.Errorf("error %q does not name the connect timeout of %v", err, tt.wantAfter)
				}
			})
		})
	}
}
