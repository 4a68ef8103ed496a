package ibcm

import (
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/rdma/wire"
)

// Defaults, as Linux rdma_cm over RoCE uses them (cma.c, cm.c, rxe).
const (
	// DefaultCMResponseTimeout is CMA_CM_RESPONSE_TIMEOUT: 4.096 µs × 2^20 ≈ 4.3 s.
	DefaultCMResponseTimeout = 20
	// DefaultMaxCMRetries is CMA_MAX_CM_RETRIES.
	DefaultMaxCMRetries = 15
	// DefaultPacketLifeTime is the packet life time exponent of the
	// RoCE path record in Linux 6.1 (CMA_IBOE_PACKET_LIFETIME 18),
	// which makes the local ACK timeout 19.
	DefaultPacketLifeTime = 18
	// DefaultACKDelay is the CA ACK delay rxe reports (15), sent as
	// the REP's target ACK delay.
	DefaultACKDelay = 15
	// DefaultMRAServiceTimeout is the service timeout of the MRAs this
	// manager sends (CMA_CM_MRA_SETTING: 24, about 69 s).
	DefaultMRAServiceTimeout = 24
	// DefaultRecvDepth is the number of receive buffers on the GSI QP.
	DefaultRecvDepth = 64
	// DefaultSendDepth is the number of MADs in flight on the GSI QP.
	DefaultSendDepth = 256
)

// Options configures a Manager. The zero value gives Linux's behaviour.
type Options struct {
	// Logger receives the manager's log (hclog.NewNullLogger() when nil).
	Logger hclog.Logger
	// CMResponseTimeout is the exponent (4.096 µs × 2^n) this side
	// announces as its local and remote CM response timeouts in REQs; 0
	// means DefaultCMResponseTimeout. Tests use small values.
	CMResponseTimeout uint8
	// MaxCMRetries is how often a REQ is resent (REQ field Max CM
	// Retries, 4 bits); 0 means DefaultMaxCMRetries.
	MaxCMRetries uint8
	// PacketLifeTime is the path's packet life time exponent; 0 means
	// DefaultPacketLifeTime. The local ACK timeout of the REQ and of the
	// QP is derived from it and ACKDelay as cm_ack_timeout does.
	PacketLifeTime uint8
	// ACKDelay is this CA's ACK delay exponent, sent as the REP's target
	// ACK delay; 0 means DefaultACKDelay.
	ACKDelay uint8
	// MRAServiceTimeout is the service timeout exponent of the MRAs sent
	// for REQs the application has not answered yet; 0 means
	// DefaultMRAServiceTimeout.
	MRAServiceTimeout uint8
	// MinRNRTimer is the RNR NAK timer code given to connected QPs at
	// RTR. 0 (655 ms) is what Linux's ib_cm sets.
	MinRNRTimer uint8
	// TimeWait overrides the TimeWait duration after a disconnect (0:
	// 4.096 µs × 2^local ACK timeout, as cm_enter_timewait).
	TimeWait time.Duration
	// CAGUID overrides the CA GUID sent in REQs and REPs (0: derived from
	// the device's address like an EUI-64 from a MAC address).
	CAGUID uint64
	// RecvDepth and SendDepth size the GSI QP (0: DefaultRecvDepth,
	// DefaultSendDepth).
	RecvDepth, SendDepth int
	// TrafficClass is the GRH traffic class (IP TOS / IPv6 traffic
	// class) of the connections this side initiates, rdma_cm's
	// RDMA_OPTION_ID_TOS: the REQ's primary path carries it (as
	// cm_format_req does), the QP's address vector gets it and the
	// connection's MADs are sent with it (ib_cm sends them with the
	// path's AV). A passive connection takes the REQ's instead, as
	// ib_cm's cm_req_handler builds the AV from the REQ's path. 0: the
	// default, TOS 0.
	TrafficClass uint8
	// LocalIDPrefix, if not 0, is the top byte of every local
	// communication ID, which peers echo as the remote communication ID
	// of their REP, REJ, MRA, DREQ and DREP: a shared soft device's slot
	// (rdma/soft), by which those MADs are steered to it. A manager with
	// a prefix only initiates connections: Listen fails, since a REQ
	// carries no ID of ours to steer by.
	LocalIDPrefix uint8
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.CMResponseTimeout == 0 {
		o.CMResponseTimeout = DefaultCMResponseTimeout
	}
	o.CMResponseTimeout &= 0x1f
	if o.MaxCMRetries == 0 {
		o.MaxCMRetries = DefaultMaxCMRetries
	}
	o.MaxCMRetries = min(o.MaxCMRetries, 15)
	if o.PacketLifeTime == 0 {
		o.PacketLifeTime = DefaultPacketLifeTime
	}
	o.PacketLifeTime = min(o.PacketLifeTime, 30)
	if o.ACKDelay == 0 {
		o.ACKDelay = DefaultACKDelay
	}
	o.ACKDelay &= 0x1f
	if o.MRAServiceTimeout == 0 {
		o.MRAServiceTimeout = DefaultMRAServiceTimeout
	}
	o.MRAServiceTimeout &= 0x1f
	o.MinRNRTimer &= 0x1f
	if o.RecvDepth <= 0 {
		o.RecvDepth = DefaultRecvDepth
	}
	if o.SendDepth <= 0 {
		o.SendDepth = DefaultSendDepth
	}
	return o
}

// ACKTimeout returns the local ACK timeout exponent cm.c's cm_ack_timeout
// derives from a CA ACK delay and a packet life time:
// 4.096 µs × 2^t ≈ 4.096 µs × 2^ackDelay + 2 × 4.096 µs × 2^lifeTime,
// rounded up only when the two are within a factor of two.
func ACKTimeout(ackDelay, lifeTime uint8) uint8 {
	t := int(lifeTime) + 1
	d := int(ackDelay)
	if t >= d {
		if d >= t-1 {
			t++
		}
	} else {
		t = d
		if int(lifeTime)+1 >= d-1 {
			t++
		}
	}
	return uint8(min(31, t))
}

// cmTimeout is wire.CMTimeout for a duration of a timeout exponent.
func cmTimeout(exp uint8) time.Duration { return wire.CMTimeout(exp) }
