//go:build ibverbs && cgo

package ibverbs

/*
#include "ibverbs.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"syscall"
	"unsafe"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/rdma"
)

// Built reports whether the provider is built into this binary.
const Built = true

// Devices lists the devices rdma-core finds, with their ports and the
// populated entries of their GID tables.
func Devices() ([]DeviceInfo, error) {
	var out []DeviceInfo
	err := eachDevice(func(_ *C.struct_ibv_context, info DeviceInfo) bool {
		out = append(out, info)
		return false
	})
	return out, err
}

// eachDevice opens every device rdma-core finds and calls f with its
// context and description until f returns true (it keeps that context
// open: f owns it); the other contexts are closed.
func eachDevice(f func(ctx *C.struct_ibv_context, info DeviceInfo) (keep bool)) error {
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		if err == nil {
			err = syscall.ENODEV
		}
		if errors.Is(err, syscall.ENOSYS) {
			// rdma-core says ENOSYS when /sys/class/infiniband is
			// missing: the kernel has no RDMA core loaded.
			return fmt.Errorf("ibverbs: ibv_get_device_list: %w: no RDMA devices (no RDMA support in this kernel: load ib_uverbs and the NIC's or rxe's driver; `rdma link` lists the devices)", err)
		}
		return fmt.Errorf("ibverbs: ibv_get_device_list: %w", err)
	}
	defer C.ibv_free_device_list(list)
	for _, d := range unsafe.Slice(list, int(n)) {
		ctx := C.ibv_open_device(d)
		if ctx == nil {
			continue
		}
		info, err := describe(ctx)
		if err == nil && f(ctx, info) {
			return nil
		}
		C.ibv_close_device(ctx)
	}
	return nil
}

// describe queries a device's ports and GID tables.
func describe(ctx *C.struct_ibv_context) (DeviceInfo, error) {
	info := DeviceInfo{Name: C.GoString(C.ibv_get_device_name(ctx.device))}
	var da C.struct_ibv_device_attr
	if r := C.ibv_query_device(ctx, &da); r != 0 {
		return info, fmt.Errorf("ibverbs: %s: ibv_query_device: %w", info.Name, syscall.Errno(r))
	}
	for port := 1; port <= int(da.phys_port_cnt); port++ {
		var pa C.struct_ibv_port_attr
		if C.nv_query_port(ctx, C.uint8_t(port), &pa) != 0 {
			continue
		}
		p := PortInfo{Port: port, State: rdma.PortState(pa.state), ActiveMTU: rdma.MTU(pa.active_mtu), LinkLayer: linkLayer(pa.link_layer)}
		for i := 0; i < int(pa.gid_tbl_len); i++ {
			var e C.struct_ibv_gid_entry
			if C.nv_query_gid(ctx, C.uint32_t(port), C.uint32_t(i), &e) != 0 {
				continue
			}
			g := GIDEntry{Index: i, Type: GIDType(e.gid_type)}
			copy(g.GID[:], C.GoBytes(unsafe.Pointer(&e.gid), 16))
			if g.GID == (rdma.GID{}) {
				continue
			}
			if e.ndev_ifindex != 0 {
				var name [C.IF_NAMESIZE]C.char
				if C.if_indextoname(C.uint(e.ndev_ifindex), &name[0]) != nil {
					g.Netdev = C.GoString(&name[0])
				}
			}
			p.GIDs = append(p.GIDs, g)
		}
		info.Ports = append(info.Ports, p)
	}
	return info, nil
}

func linkLayer(l C.uint8_t) string {
	switch l {
	case C.IBV_LINK_LAYER_ETHERNET:
		return "Ethernet"
	case C.IBV_LINK_LAYER_INFINIBAND, C.IBV_LINK_LAYER_UNSPECIFIED:
		return "InfiniBand"
	}
	return fmt.Sprintf("link layer %d", int(l))
}

// device is an open device port.
type device struct {
	cfg  Config
	log  hclog.Logger
	ctx  *C.struct_ibv_context
	info Info
	port rdma.PortAttr
	attr rdma.DeviceAttr

	// rxe is 1 on an rxe device (vendor ID 0xffffff), whose receive
	// completions need their flags translated (see nv_poll_cq).
	rxe C.int

	mu     sync.Mutex
	cm     *connManager
	closed bool
	qps    map[uint32]*qp // by QP number, for marking a QP in Err from its completions
	poller poller
}

func (d *device) addQP(q *qp) {
	d.mu.Lock()
	d.qps[q.qpn] = q
	d.mu.Unlock()
}

func (d *device) removeQP(q *qp) {
	d.mu.Lock()
	if d.qps[q.qpn] == q {
		delete(d.qps, q.qpn)
	}
	d.mu.Unlock()
}

// qpErr marks the QP of a failed completion as in Err: the device moved
// it there (a requester after an error completion, a responder that
// flushes its receives).
func (d *device) qpErr(qpn uint32) {
	d.mu.Lock()
	q := d.qps[qpn]
	d.mu.Unlock()
	if q != nil {
		q.markErr()
	}
}

// Open opens the device that cfg selects: by name, or the one whose GID
// table holds cfg.Addr (see DeviceInfo.Match).
func Open(cfg Config) (Device, error) {
	if !cfg.Addr.IsValid() {
		return nil, fmt.Errorf("ibverbs: no address: %w", rdma.ErrInvalidArgument)
	}
	cfg.Addr = cfg.Addr.Unmap()
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	var names []string
	var dev *device
	var openErr error
	err := eachDevice(func(ctx *C.struct_ibv_context, info DeviceInfo) bool {
		names = append(names, info.Name)
		p, g, ok := info.Match(cfg)
		if !ok {
			return false
		}
		if dev, openErr = newDevice(cfg, log, ctx, info, p, g); openErr != nil {
			C.ibv_close_device(ctx)
		}
		return true
	})
	switch {
	case err != nil:
		return nil, err
	case openErr != nil:
		return nil, openErr
	case dev != nil:
		return dev, nil
	}
	switch {
	case len(names) == 0:
		return nil, fmt.Errorf("ibverbs: %w: rdma-core found no RDMA device (none installed, or its driver or ib_uverbs not loaded)", ErrNoDevice)
	case cfg.Name != "":
		return nil, fmt.Errorf("ibverbs: %w named %q with %s in its GID table (devices: %v)", ErrNoDevice, cfg.Name, cfg.Addr, names)
	}
	return nil, fmt.Errorf("ibverbs: %w has %s in its GID table (devices: %v; is the address on the device's network interface?)", ErrNoDevice, cfg.Addr, names)
}

// rxeVendorID is the vendor ID the kernel's rxe reports (RXE_VENDOR_ID).
const rxeVendorID = 0xffffff

func newDevice(cfg Config, log hclog.Logger, ctx *C.struct_ibv_context, info DeviceInfo, p PortInfo, g GIDEntry) (*device, error) {
	var da C.struct_ibv_device_attr
	if r := C.ibv_query_device(ctx, &da); r != 0 {
		return nil, fmt.Errorf("ibverbs: %s: ibv_query_device: %w", info.Name, syscall.Errno(r))
	}
	var pa C.struct_ibv_port_attr
	if r := C.nv_query_port(ctx, C.uint8_t(p.Port), &pa); r != 0 {
		return nil, fmt.Errorf("ibverbs: %s port %d: ibv_query_port: %w", info.Name, p.Port, syscall.Errno(r))
	}
	d := &device{
		cfg: cfg,
		qps: map[uint32]*qp{},
		log: log.With("device", info.Name),
		ctx: ctx,
		info: Info{Name: info.Name, Port: p.Port, GIDIndex: g.Index, GIDType: g.Type, MTU: rdma.MTU(pa.active_mtu),
			LinkLayer: p.LinkLayer, Netdev: g.Netdev, VendorID: uint32(da.vendor_id)},
		port: rdma.PortAttr{
			State:      rdma.PortState(pa.state),
			MaxMTU:     rdma.MTU(pa.max_mtu),
			ActiveMTU:  rdma.MTU(pa.active_mtu),
			GIDTblLen:  int(pa.gid_tbl_len),
			PKeyTblLen: int(pa.pkey_tbl_len),
			MaxMsgSize: uint32(pa.max_msg_sz),
		},
		attr: rdma.DeviceAttr{
			MaxQP:           int(da.max_qp),
			MaxQPWR:         int(da.max_qp_wr),
			MaxSGE:          int(da.max_sge),
			MaxCQE:          int(da.max_cqe),
			MaxMR:           int(da.max_mr),
			MaxQPRdAtom:     int(da.max_qp_rd_atom),
			MaxQPInitRdAtom: int(da.max_qp_init_rd_atom),
		},
	}
	if da.vendor_id == rxeVendorID {
		d.rxe = 1
	}
	d.attr.MaxInlineData = probeInline(ctx)
	if d.port.State != rdma.PortActive {
		log.Warn("port is not active", "device", info.Name, "port", p.Port, "state", d.port.State)
	}
	return d, nil
}

// Name implements rdma.Device.
func (d *device) Name() string { return d.info.Name }

// Addr implements rdma.Device.
func (d *device) Addr() netip.Addr { return d.cfg.Addr }

// GID implements rdma.Device: the address as a GID.
func (d *device) GID() rdma.GID { return rdma.GIDFromAddr(d.cfg.Addr) }

// Port implements rdma.Device.
func (d *device) Port() rdma.PortAttr { return d.port }

// Attr implements rdma.Device.
func (d *device) Attr() rdma.DeviceAttr { return d.attr }

// Info implements Device.
func (d *device) Info() Info { return d.info }

// AllocPD implements rdma.Device.
func (d *device) AllocPD() (rdma.PD, error) {
	if err := d.alive(); err != nil {
		return nil, err
	}
	p, err := C.ibv_alloc_pd(d.ctx)
	if p == nil {
		return nil, fmt.Errorf("ibverbs: %s: ibv_alloc_pd: %w", d.info.Name, errnoErr(err))
	}
	return &pd{dev: d, pd: p}, nil
}

// ConnManager implements rdma.Device: the connection manager on
// librdmacm, one per device.
func (d *device) ConnManager() (rdma.ConnManager, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("ibverbs: %s: %w", d.info.Name, rdma.ErrClosed)
	}
	if d.cm == nil {
		cm, err := newConnManager(d)
		if err != nil {
			return nil, err
		}
		d.cm = cm
	}
	return d.cm, nil
}

// Close implements rdma.Device: it stops the connection manager and
// closes the device context.
func (d *device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	cm := d.cm
	d.mu.Unlock()
	if cm != nil {
		cm.shutdown()
	}
	d.poller.stop()
	if r := C.ibv_close_device(d.ctx); r != 0 {
		return fmt.Errorf("ibverbs: %s: ibv_close_device: %w", d.info.Name, syscall.Errno(-r))
	}
	return nil
}

func (d *device) alive() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("ibverbs: %s: %w", d.info.Name, rdma.ErrClosed)
	}
	return nil
}

// errnoErr maps a failed verb's errno onto the rdma package's errors,
// keeping the errno in the chain.
func errnoErr(err error) error {
	var e syscall.Errno
	if !errors.As(err, &e) {
		if err == nil {
			return errors.New("unknown error")
		}
		return err
	}
	switch e {
	case syscall.ENOMEM:
		return fmt.Errorf("%w (%v)", rdma.ErrQueueFull, e)
	case syscall.EINVAL:
		return fmt.Errorf("%w (%v)", rdma.ErrInvalidArgument, e)
	case syscall.EOPNOTSUPP:
		return fmt.Errorf("%w (%v)", rdma.ErrNotSupported, e)
	case syscall.EBUSY:
		return fmt.Errorf("%w (%v)", rdma.ErrBusy, e)
	}
	return e
}

// pd is a protection domain.
type pd struct {
	dev  *device
	pd   *C.struct_ibv_pd
	mu   sync.Mutex
	dead bool
	// mrs are the regions registered and not yet deregistered: they hold
	// their buffers' pins (mr.go).
	mrs map[*mr]struct{}
}

var _ rdma.MWAllocator = (*pd)(nil)

// AllocMW implements rdma.MWAllocator: a type-2 memory window.
func (p *pd) AllocMW() (rdma.MW, error) {
	m, err := C.nv_alloc_mw(p.pd)
	if m == nil {
		return nil, fmt.Errorf("ibverbs: %s: ibv_alloc_mw (type 2): %w", p.dev.info.Name, errnoErr(err))
	}
	return &mw{mw: m}, nil
}

// CreateQP implements rdma.PD.
func (p *pd) CreateQP(attr *rdma.QPInitAttr) (rdma.QP, error) {
	return newQP(p, attr)
}

// Dealloc implements rdma.PD.
func (p *pd) Dealloc() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return nil
	}
	if r := C.ibv_dealloc_pd(p.pd); r != 0 {
		return fmt.Errorf("ibverbs: ibv_dealloc_pd: %w", errnoErr(syscall.Errno(r)))
	}
	p.dead = true
	return nil
}

// mw is a type-2 memory window. Its rkey lives in the C struct, which
// PostSend updates on each bind it posts.
type mw struct {
	mw   *C.struct_ibv_mw
	mu   sync.Mutex
	dead bool
}

// RKey implements rdma.MW.
func (m *mw) RKey() uint32 { return uint32(m.mw.rkey) }

// Dealloc implements rdma.MW.
func (m *mw) Dealloc() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dead {
		return nil
	}
	if r := C.nv_dealloc_mw(m.mw); r != 0 {
		return fmt.Errorf("ibverbs: ibv_dealloc_mw: %w", errnoErr(syscall.Errno(r)))
	}
	m.dead = true
	return nil
}

// probeInline returns the inline data an RC QP of the device takes:
// ibv_device_attr does not say, so a QP is created to ask.
func probeInline(ctx *C.struct_ibv_context) int {
	p := C.ibv_alloc_pd(ctx)
	if p == nil {
		return 0
	}
	defer C.ibv_dealloc_pd(p)
	cq := C.ibv_create_cq(ctx, 2, nil, nil, 0)
	if cq == nil {
		return 0
	}
	defer C.ibv_destroy_cq(cq)
	for _, want := range []int{512, 256, 128, 64} {
		var ia C.struct_ibv_qp_init_attr
		ia.send_cq, ia.recv_cq, ia.qp_type = cq, cq, C.IBV_QPT_RC
		ia.cap.max_send_wr, ia.cap.max_recv_wr, ia.cap.max_send_sge, ia.cap.max_recv_sge = 1, 1, 1, 1
		ia.cap.max_inline_data = C.uint32_t(want)
		if q := C.ibv_create_qp(p, &ia); q != nil {
			got := int(ia.cap.max_inline_data)
			C.ibv_destroy_qp(q)
			return max(got, want)
		}
	}
	return 0
}
