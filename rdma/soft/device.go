package soft

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/ibcm"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// Config configures a soft device. Only Addr is required.
type Config struct {
	// Addr is the device's IPv4 or IPv6 address (an IPv4-mapped IPv6
	// address counts as IPv4; link-local IPv6 addresses, which need a
	// zone, are not supported); the device binds UDP port 4791 on it.
	Addr netip.Addr
	// Name is the device name (default "soft-" + Addr).
	Name string
	// MTU caps the active path MTU in bytes (256..4096). 0 derives it from
	// the MTU of the interface holding Addr (at most 4096).
	MTU int
	// Pcap, if set, receives a classic pcap stream (LINKTYPE_RAW) of every
	// packet sent and received, with the IP and UDP headers the kernel
	// sends. Writes happen on the data path under a lock.
	Pcap io.Writer
	// SendFaults and RecvFaults inject faults into sent or received
	// packets (tests only). SetFaults changes them later.
	SendFaults, RecvFaults *FaultConfig
	// MaxUnacked is the requester's window: packets (PSNs) outstanding
	// without acknowledgement per QP (default 256).
	MaxUnacked int
	// AckReqEvery makes the requester set AckReq at least every this many
	// packets (default 32). The responder acknowledges at AckReq or after
	// this many unacknowledged packets.
	AckReqEvery int
	// ReadChunk is the number of response packets one RDMA READ request
	// asks for (default 32): a larger READ work request is issued as
	// several READ requests for consecutive ranges, each counted against
	// max_rd_atomic and the window, which paces the responder.
	ReadChunk int
	// RecvBuffer is the receive buffer of the receiving socket in bytes
	// (default 16 MiB).
	RecvBuffer int
	// RecvBatch is the number of datagrams read per recvmmsg (default 64).
	RecvBatch int
	// UDPPort and PeerUDPPort are for tests that run two devices on one
	// address, as on ::1, the only IPv6 loopback address, where two
	// devices cannot each bind [::1]:4791. UDPPort, if not 0, is the UDP
	// port the device binds instead of 4791 (-1: a free port the kernel
	// picks; Device.UDPPort tells which); PeerUDPPort, if not 0, is the
	// port it sends every packet to instead of 4791 (SetPeerUDPPort
	// changes it). Each device of such a pair sends to the other's port.
	// The ICRC covers the ports as sent. RoCEv2 peers (rxe, hardware) only
	// use port 4791.
	UDPPort, PeerUDPPort int
	// DisableGSO turns off GSO mode. By default a device whose address is
	// in 127.0.0.0/8 runs in GSO mode (gso.go): it sends runs of
	// equal-size packets as UDP GSO super-datagrams (with the UDP
	// checksum on, which GSO needs) and receives through its UDP socket
	// with UDP_GRO, rebuilding each packet's IP header for the ICRC as a
	// soft device sends it; it needs no CAP_NET_RAW. Every RoCEv2 sender
	// on lo must then be such a device: the packets of another one
	// (rdma_rxe bound to lo) fail the ICRC. An IPv4 device on any other
	// address runs in udp4 mode (net_linux.go): GSO mode for datagrams
	// with IP ID 0, which soft senders send, and a raw socket
	// (CAP_NET_RAW) for the others, rdma_rxe's, checked against the
	// header they came with. With DisableGSO an IPv4 device sends one
	// datagram per packet without UDP checksum and receives through a
	// raw socket only, as rxe does; it cannot take GSO sends that reach
	// it whole (over lo or a veth), so its soft peers there need
	// DisableGSO too. An IPv6 device always receives through its UDP
	// socket (no raw socket, no privilege: see net_linux.go);
	// DisableGSO turns off its UDP_GRO and its GSO sends. Unlike raw mode
	// it still takes its peers' GSO sends: the kernel segments them for
	// a socket without UDP_GRO.
	DisableGSO bool
	// RecvQueues is the number of receive queues: sockets each read by
	// its own goroutine, which spreads a device's receive and completion
	// work over cores; all packets for one QP go to one queue, picked by
	// destination QP number (net_linux.go). 0 means min(GOMAXPROCS, 4);
	// 1 gives one receive goroutine per device.
	RecvQueues int
	// FixedSourcePort sends every packet from the device's own UDP port
	// (4791) instead of a source port per QP (sport.go), which is what
	// RoCEv2 peers and switches hash flows on.
	FixedSourcePort bool
	// Logger receives the connection manager's logs (nil: none).
	Logger hclog.Logger
	// MinRNRTimer is the RNR NAK timer the connection manager gives the
	// QPs it connects: how long their responder asks a requester whose
	// SEND found no receive posted to wait before resending. It is
	// rounded up to an RNR timer code (IBA vol. 1 table 45); 0 means
	// DefaultMinRNRTimer. Linux's ib_cm gives code 0, 655.36 ms, which
	// makes every RNR NAK cost the connection more than half a second.
	MinRNRTimer time.Duration
	// TrafficClass is the GRH traffic class (the IP TOS, DSCP << 2 |
	// ECN; on IPv6 the traffic class) of the connections the connection
	// manager initiates, as rdma_cm's RDMA_OPTION_ID_TOS: it goes into
	// the REQ and the QP's address vector. Connections it accepts use
	// the requester's. 0: TOS 0. A QP's own address vector
	// (QPAttr.AH.TrafficClass, a UD work request's AH) decides what its
	// datagrams carry (tos.go).
	TrafficClass uint8
	// AckDelay is how long the responder may hold the acknowledgement of
	// a request that ended a message (AckReq on its last packet) for the
	// QP's next packets to carry along: an NVMe host's next command, a
	// target's response. The peer then reads both in one wake-up instead
	// of two. ACKs the requester needs to go on (every AckReqEvery
	// packets, duplicates) and NAKs are never held. An ACK nothing
	// carries leaves at the delayed-ACK timer's first tick after
	// AckDelay: at most AckDelay + 2 ms after its request, and never
	// later than 1/32 of the QP's local ACK timeout + 5 AckDelays
	// (qp.ackTick). 0 means
	// DefaultAckDelay; a negative value sends every ACK at the end of its
	// receive batch.
	AckDelay time.Duration
	// Share opens the device as one of several soft devices, in this
	// process or others, that hold the same address and UDP port, each
	// receiving the packets of its own QPs (share_linux.go): as rdma_rxe
	// is one device for every QP of a netdev, so every connection of a
	// host can use its one address. A shared device only initiates
	// connections (its connection manager cannot listen). It needs
	// CAP_BPF and CAP_NET_ADMIN (root) to load its steering program,
	// except in raw mode; ErrShareUnsupported says it could not.
	// A device opened without Share cannot join shared ones, nor they
	// it (EADDRINUSE either way). UDPPort -1 cannot be shared.
	Share bool
	// ShareDir is where shared devices keep their lock and map files
	// (default DefaultShareDir).
	ShareDir string
	// Congestion configures RoCEv2 congestion control: ECN marking, CNPs
	// and DCQCN (congestion.go, docs/congestion.md). nil or not Enabled:
	// off, as rdma_rxe.
	Congestion *CongestionConfig
}

// DefaultAckDelay is the default Config.AckDelay: even held five times as
// long (500 µs, on a QP with the shortest timeouts), below any RC
// retransmission timeout (rxe's shortest is 4.096 µs × 2^8 ≈ 1 ms), and
// long enough for a host on this kind of machine to answer a completion.
const DefaultAckDelay = 100 * time.Microsecond

// DefaultMinRNRTimer is the default Config.MinRNRTimer (RNR timer code 14).
const DefaultMinRNRTimer = 1280 * time.Microsecond

// Device is a software RoCEv2 HCA on one IPv4 or IPv6 address. It
// implements rdma.Device.
type Device struct {
	cfg    Config
	name   string
	addr   netip.Addr
	addr4  [4]byte  // IPv4 devices
	addr16 [16]byte // the address as a GID (IPv4-mapped for IPv4)
	v6     bool
	hl     int // IP and UDP header length of the device's family
	gid    wire.GID
	mtu    rdma.MTU
	socks  *sockets
	// port is the UDP port the device's socket is bound to (4791 unless
	// Config.UDPPort); peerPort the port it sends to.
	port     uint16
	peerPort atomic.Uint32

	mu      sync.RWMutex // protects qps, nextQPN, closed
	qps     map[uint32]*qp
	nextQPN uint32
	closed  bool

	mrs mrTable

	// cc is the device's congestion control (nil: off), read on the data
	// path; ccMu serializes SetCongestion, which also keeps ccCfg (the
	// settings cc was made from). pacedPool holds the packets of
	// rate-limited QPs' paced queues (congestion.go).
	cc        atomic.Pointer[ccState]
	ccMu      sync.Mutex
	ccCfg     *CongestionConfig
	pacedPool sync.Pool

	sendFaults atomic.Pointer[faults]
	recvFaults atomic.Pointer[faults]
	pcap       *pcapWriter

	commEst atomic.Pointer[func(qpn uint32)]

	cmOnce sync.Once
	cm     *ibcm.Manager
	cmErr  error

	txPool sync.Pool
	stats  counters
	rxDone sync.WaitGroup // the receive goroutines
	// rxqs are the receive queues' states, shared by their goroutines
	// and Progress (progress.go).
	rxqs []atomic.Pointer[rxQueue]
	// quietTimer runs watchQuiet every quietEvery (quietCheck; tests
	// change it) while a receive queue is quiet (polled); quietArmed: it
	// is set to.
	quietTimer *time.Timer
	quietArmed atomic.Bool
	quietEvery atomic.Int64
	// rxqPackets counts the packets each receive queue read.
	rxqPackets []atomic.Uint64
	// handlers tracks CQs with completion handlers to run (handler.go).
	handlers handlerState
}

// Device limits.
const (
	maxQPWR       = 16384
	maxSGE        = 32
	maxCQE        = 1 << 20
	maxInline     = 1024
	maxRdAtomic   = 128
	maxMsgSize    = 1 << 31
	firstQPN      = 0x11
	maxPacketSize = wire.BTHLen + wire.RETHLen + wire.ImmDtLen + wire.IETHLen + wire.DETHLen + 4096 + 3 + wire.ICRCLen
)

// maxRecvQueues caps Config.RecvQueues (and its default).
const maxRecvQueues = 4

var _ rdma.Device = (*Device)(nil)

// Open creates a soft device on cfg.Addr: it opens UDP port 4791 (and,
// for IPv4 in raw mode, a raw socket, which needs CAP_NET_RAW; see
// Config.DisableGSO) and starts the receive goroutines (Config.RecvQueues).
func Open(cfg Config) (*Device, error) {
	cfg.Addr = cfg.Addr.Unmap()
	switch a := cfg.Addr; {
	case !a.IsValid():
		return nil, fmt.Errorf("soft: no address: %w", rdma.ErrInvalidArgument)
	case a.Zone() != "" || a.IsLinkLocalUnicast():
		return nil, fmt.Errorf("soft: address %v: link-local addresses are not supported: %w", a, rdma.ErrInvalidArgument)
	case a.IsMulticast() || a.IsUnspecified():
		return nil, fmt.Errorf("soft: address %v: need a unicast address: %w", a, rdma.ErrInvalidArgument)
	case cfg.UDPPort < -1 || cfg.UDPPort > 0xffff || cfg.PeerUDPPort < 0 || cfg.PeerUDPPort > 0xffff:
		return nil, fmt.Errorf("soft: UDP ports %d and %d: %w", cfg.UDPPort, cfg.PeerUDPPort, rdma.ErrInvalidArgument)
	case cfg.Share && cfg.UDPPort == -1:
		return nil, fmt.Errorf("soft: a shared device needs a known UDP port: %w", rdma.ErrInvalidArgument)
	}
	// QP numbers start at a random point so that stray packets of an
	// earlier device on the same address rarely find a QP.
	d := &Device{cfg: cfg, addr: cfg.Addr, addr16: cfg.Addr.As16(), v6: cfg.Addr.Is6(), gid: wire.GIDFromAddr(cfg.Addr), qps: make(map[uint32]*qp),
		nextQPN: firstQPN + rand.Uint32N(0x10000)}
	d.hl = wire.IPv4HeaderLen + wire.UDPHeaderLen
	if d.v6 {
		d.hl = wire.IPv6HeaderLen + wire.UDPHeaderLen
	} else {
		d.addr4 = cfg.Addr.As4()
	}
	bind := uint16(wire.UDPPort)
	switch {
	case cfg.UDPPort == -1:
		bind = 0
	case cfg.UDPPort > 0:
		bind = uint16(cfg.UDPPort)
	}
	d.SetPeerUDPPort(cfg.PeerUDPPort)
	d.name = cfg.Name
	if d.name == "" {
		d.name = "soft-" + cfg.Addr.String()
	}
	if d.cfg.MaxUnacked <= 0 {
		d.cfg.MaxUnacked = 256
	}
	if d.cfg.AckReqEvery <= 0 {
		d.cfg.AckReqEvery = 32
	}
	if d.cfg.ReadChunk <= 0 {
		d.cfg.ReadChunk = 32
	}
	d.cfg.ReadChunk = min(d.cfg.ReadChunk, d.cfg.MaxUnacked)
	if d.cfg.RecvBuffer <= 0 {
		d.cfg.RecvBuffer = 16 << 20
	}
	if d.cfg.RecvBatch <= 0 {
		d.cfg.RecvBatch = 64
	}
	if d.cfg.RecvQueues <= 0 {
		d.cfg.RecvQueues = min(runtime.GOMAXPROCS(0), maxRecvQueues)
	}
	d.cfg.RecvQueues = min(d.cfg.RecvQueues, maxRecvQueues)
	if d.cfg.MinRNRTimer <= 0 {
		d.cfg.MinRNRTimer = DefaultMinRNRTimer
	}
	if d.cfg.AckDelay == 0 {
		d.cfg.AckDelay = DefaultAckDelay
	}
	cc, err := newCCState(cfg.Congestion)
	if err != nil {
		return nil, err
	}
	d.cc.Store(cc)
	d.ccCfg = cloneCC(cfg.Congestion)
	mtu := cfg.MTU
	if mtu == 0 {
		// As rxe: the interface MTU minus a GRH, UDP, BTH, the largest
		// extended headers and the ICRC (96 bytes; 1500 gives 1024).
		mtu = interfaceMTU(cfg.Addr) - 96
	}
	var ok bool
	if d.mtu, ok = rdma.MTUFromBytes(min(mtu, 4096)); !ok {
		return nil, fmt.Errorf("soft: MTU %d below 256: %w", mtu, rdma.ErrInvalidArgument)
	}
	if cfg.Pcap != nil {
		pw, err := newPcapWriter(cfg.Pcap)
		if err != nil {
			return nil, fmt.Errorf("soft: pcap: %w", err)
		}
		d.pcap = pw
	}
	d.SetFaults(cfg.SendFaults, cfg.RecvFaults)
	d.txPool.New = func() any { return newTxBatch(d) }
	d.pacedPool.New = func() any { return new(txPkt) }
	var share *shareGroup
	if cfg.Share {
		g, err := joinShare(cfg.ShareDir, cfg.Addr, bind)
		if err != nil {
			return nil, err
		}
		share = g
		d.nextQPN = g.qpnBase() | (firstQPN + rand.Uint32N(1<<shareQPNBits-firstQPN))
	}
	s, err := openSockets(cfg.Addr, bind, d.cfg.RecvBuffer, !d.cfg.DisableGSO, d.cfg.RecvQueues, share)
	if share != nil {
		if err != nil {
			share.leave()
		} else {
			share.joined()
		}
	}
	if err != nil {
		return nil, err
	}
	d.socks = s
	d.port = s.localPort()
	d.mrs.init(d.mrSeed())
	d.rxqPackets = make([]atomic.Uint64, len(s.recv))
	d.rxqs = make([]atomic.Pointer[rxQueue], len(s.recv))
	d.quietEvery.Store(int64(quietCheck))
	d.quietTimer = time.AfterFunc(time.Hour, d.watchQuiet)
	d.quietTimer.Stop()
	rqs := make([]*rxQueue, len(s.recv))
	for i, sc := range s.recv {
		rq, err := d.newRxQueue(sc, i, s.udpQueue(i))
		if err != nil {
			for _, rq := range rqs[:i] {
				rq.w.close()
			}
			if g := s.share; g != nil {
				g.beginLeave()
				s.close()
				g.leave()
			} else {
				s.close()
			}
			return nil, err
		}
		rqs[i] = rq
		d.rxqs[i].Store(rq)
	}
	for _, rq := range rqs {
		d.rxDone.Add(1)
		go d.rxLoop(rq)
	}
	return d, nil
}

// mrSeed returns what picks the device's virtual address window and
// first key (mr.go): the IPv4 address, as it always was; for IPv6 the
// address folded to 4 bytes and the UDP port, so that two devices on ::1
// differ.
func (d *Device) mrSeed() [4]byte {
	s := d.addr4
	if d.v6 {
		s = [4]byte{}
		for i, b := range d.addr16 {
			s[i%4] ^= b
		}
		s[2] ^= byte(d.port >> 8)
		s[3] ^= byte(d.port)
	}
	if g := d.socks.share; g != nil {
		s[1] ^= g.slot // shared devices of one address differ
	}
	return s
}

// sameFamily reports whether g is the GID of an address of the device's
// family: IPv4-mapped for an IPv4 device, any other for an IPv6 one.
func (d *Device) sameFamily(g rdma.GID) bool {
	return g.Addr().Is4() != d.v6
}

// Shared reports whether the device shares its address and port with
// other soft devices (Config.Share).
func (d *Device) Shared() bool { return d.socks.share != nil }

// UDPPort returns the UDP port the device is bound to (4791 unless
// Config.UDPPort).
func (d *Device) UDPPort() int { return int(d.port) }

// SetPeerUDPPort sets the UDP port the device sends to (0: 4791). It is
// for tests (Config.PeerUDPPort).
func (d *Device) SetPeerUDPPort(port int) {
	if port <= 0 || port > 0xffff {
		port = wire.UDPPort
	}
	d.peerPort.Store(uint32(port))
}

// interfaceMTU returns the MTU of the interface holding a, or 1500.
func interfaceMTU(a netip.Addr) int {
	ifs, err := net.Interfaces()
	if err != nil {
		return 1500
	}
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, ad := range addrs {
			if pfx, ok := ad.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(pfx.IP); ok && ip.Unmap() == a {
					return ifc.MTU
				}
			}
		}
	}
	if a.IsLoopback() {
		return 65536
	}
	return 1500
}

// rnrTimerCode returns the RNR timer code of the shortest wait of at
// least d (code 0, the longest, for anything above 491.52 ms).
func rnrTimerCode(d time.Duration) uint8 {
	for code := uint8(1); code < 32; code++ {
		if rdma.RNRTimerDuration(code) >= d {
			return code
		}
	}
	return 0
}

// Name returns the device name.
func (d *Device) Name() string { return d.name }

// Addr returns the device's IP address.
func (d *Device) Addr() netip.Addr { return d.addr }

// GID returns the device's GID: its IPv6 address, or its IPv4-mapped
// address.
func (d *Device) GID() rdma.GID { return d.gid }

// Port returns the port attributes.
func (d *Device) Port() rdma.PortAttr {
	return rdma.PortAttr{State: rdma.PortActive, MaxMTU: rdma.MTU4096, ActiveMTU: d.mtu, GIDTblLen: 1, PKeyTblLen: 1, MaxMsgSize: maxMsgSize}
}

// Attr returns the device limits.
func (d *Device) Attr() rdma.DeviceAttr {
	return rdma.DeviceAttr{MaxQP: 1 << 16, MaxQPWR: maxQPWR, MaxSGE: maxSGE, MaxCQE: maxCQE, MaxMR: 1 << 20, LazyMR: true,
		MaxQPRdAtom: maxRdAtomic, MaxQPInitRdAtom: maxRdAtomic, MaxInlineData: maxInline}
}

// ConnManager returns the device's connection manager: the InfiniBand CM
// of package ibcm on the device's GSI QP (QP1), created on first use and
// destroyed by Close. The QPs it connects get Config.MinRNRTimer.
func (d *Device) ConnManager() (rdma.ConnManager, error) {
	d.cmOnce.Do(func() {
		opts := ibcm.Options{Logger: d.cfg.Logger, MinRNRTimer: rnrTimerCode(d.cfg.MinRNRTimer), TrafficClass: d.cfg.TrafficClass}
		if g := d.socks.share; g != nil {
			opts.LocalIDPrefix = g.slot
		}
		m, err := ibcm.New(d, opts)
		if err != nil {
			d.cmErr = fmt.Errorf("soft: %s: connection manager: %w", d.name, err)
			return
		}
		d.SetCommEstablished(m.CommEstablished)
		d.cm = m
	})
	if d.cmErr != nil {
		return nil, d.cmErr
	}
	return d.cm, nil
}

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (rdma.PD, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return nil, fmt.Errorf("soft: %s: %w", d.name, rdma.ErrClosed)
	}
	return &pd{dev: d}, nil
}

// CreateCQ creates a completion queue holding up to entries completions.
func (d *Device) CreateCQ(entries int) (rdma.CQ, error) {
	if entries <= 0 || entries > maxCQE {
		return nil, fmt.Errorf("soft: CQ with %d entries: %w", entries, rdma.ErrInvalidArgument)
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return nil, fmt.Errorf("soft: %s: %w", d.name, rdma.ErrClosed)
	}
	return newCQ(d, entries), nil
}

// SetCommEstablished registers f to be called when an RC QP in state RTR
// receives its first request packet (the verbs' communication
// established event, IB_EVENT_COMM_EST): a connection manager uses it to
// finish a passive connection whose RTU was lost. f runs in the receive
// goroutine with the QP locked: it must not block or call into the QP.
// nil removes the handler.
func (d *Device) SetCommEstablished(f func(qpn uint32)) {
	if f == nil {
		d.commEst.Store(nil)
		return
	}
	d.commEst.Store(&f)
}

// SetFaults replaces the fault injection on the send and receive paths
// (nil disables it).
func (d *Device) SetFaults(send, recv *FaultConfig) {
	d.sendFaults.Store(newFaults(send))
	d.recvFaults.Store(newFaults(recv))
}

// Close stops the receive goroutines, closes the sockets and moves every
// QP to the error state.
func (d *Device) Close() error {
	d.cmOnce.Do(func() {}) // no manager from now on
	if d.cm != nil {
		d.cm.Destroy()
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	qps := make([]*qp, 0, len(d.qps))
	for _, q := range d.qps {
		qps = append(qps, q)
	}
	d.mu.Unlock()
	// The receive goroutines end first: they read the sockets' descriptors
	// outside sockConn's lock.
	d.quietTimer.Stop()
	for i := range d.rxqs {
		d.rxqs[i].Load().w.close()
	}
	d.rxDone.Wait()
	if g := d.socks.share; g != nil {
		g.beginLeave()
		d.socks.close()
		g.leave()
	} else {
		d.socks.close()
	}
	for _, q := range qps {
		q.mu.Lock()
		q.stopTimers()
		q.enterError()
		q.mu.Unlock()
	}
	if d.pcap != nil {
		d.pcap.stop()
	}
	return nil
}

func (d *Device) isClosed() bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.closed
}

// lookupQP returns the QP numbered qpn, or nil.
func (d *Device) lookupQP(qpn uint32) *qp {
	d.mu.RLock()
	q := d.qps[qpn]
	d.mu.RUnlock()
	return q
}

// addQP assigns q a QP number (1 for the GSI QP), registers it and gives
// it its source port (sport.go).
func (d *Device) addQP(q *qp) error {
	if err := d.registerQP(q); err != nil {
		return err
	}
	// Pollers of its CQs read the receive queue its packets come to.
	bit := uint32(1) << d.queueOf(q.qpn)
	q.scq.rxqMask.Or(bit)
	q.rcq.rxqMask.Or(bit)
	// Until then packets of q (in state Reset) leave from the device's port.
	q.mu.Lock()
	q.setSourcePort(qpSourcePort(q.qpn))
	// Registered first: a SetCongestion from now on finds q.
	q.syncCC()
	q.mu.Unlock()
	return nil
}

// registerQP assigns q a QP number and registers it.
func (d *Device) registerQP(q *qp) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("soft: %s: %w", d.name, rdma.ErrClosed)
	}
	if q.typ == rdma.QPTypeGSI {
		if d.qps[1] != nil {
			return fmt.Errorf("soft: %s: the GSI QP exists already: %w", d.name, rdma.ErrBusy)
		}
		q.qpn = 1
		d.qps[1] = q
		return nil
	}
	lo, hi := uint32(firstQPN), uint32(wire.QPNMask)
	if g := d.socks.share; g != nil {
		lo, hi = g.qpnBase()|firstQPN, g.qpnBase()|(1<<shareQPNBits-1)
		if len(d.qps)*shareKeys > int(hi-lo)*d.socks.queues() {
			return fmt.Errorf("soft: %s: every QP number of a shared device is in use: %w", d.name, rdma.ErrBusy)
		}
	}
	for {
		n := d.nextQPN
		d.nextQPN++
		if d.nextQPN > hi || d.nextQPN < lo {
			d.nextQPN = lo
		}
		if d.socks.share != nil && !shareQPNOK(n, d.socks.queues()) {
			continue
		}
		if d.qps[n] == nil {
			q.qpn = n
			d.qps[n] = q
			return nil
		}
	}
}

// queueOf returns the receive queue the kernel steers QP qpn's packets
// to (net_linux.go, share_linux.go).
func (d *Device) queueOf(qpn uint32) int {
	if d.socks.share != nil {
		return shareQueue(qpn)
	}
	return int(qpn % uint32(d.socks.queues()))
}

// removeQP unregisters q and lets go of its source port.
func (d *Device) removeQP(q *qp) {
	d.mu.Lock()
	if d.qps[q.qpn] == q {
		delete(d.qps, q.qpn)
	}
	d.mu.Unlock()
	q.mu.Lock()
	q.releaseSourcePort()
	q.mu.Unlock()
}

// pd is a protection domain.
type pd struct {
	dev  *Device
	mu   sync.Mutex
	nmr  int
	nqp  int
	dead bool
}

var _ rdma.PD = (*pd)(nil)

// Dealloc releases the PD.
func (p *pd) Dealloc() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.nmr > 0 || p.nqp > 0 {
		return fmt.Errorf("soft: PD with %d MRs and %d QPs: %w", p.nmr, p.nqp, rdma.ErrBusy)
	}
	p.dead = true
	return nil
}

func (p *pd) use(mr bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return fmt.Errorf("soft: PD: %w", rdma.ErrClosed)
	}
	if mr {
		p.nmr++
	} else {
		p.nqp++
	}
	return nil
}

func (p *pd) release(mr bool) {
	p.mu.Lock()
	if mr {
		p.nmr--
	} else {
		p.nqp--
	}
	p.mu.Unlock()
}
