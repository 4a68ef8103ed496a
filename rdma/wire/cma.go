package wire

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// rdma_cm over InfiniBand CM (IBA vol. 1 annex A11 "RDMA IP CM Service";
// Linux drivers/infiniband/core/cma.c): the service ID carries the port
// space and port, and the REQ private data starts with struct cma_hdr.

// rdma_cm port spaces (enum rdma_ucm_port_space).
const (
	RDMAPSIPoIB = 0x0002
	RDMAPSIB    = 0x013f
	RDMAPSTCP   = 0x0106
	RDMAPSUDP   = 0x0111
)

// serviceIDPSMask keeps the port-space part of an rdma_cm service ID
// (RDMA_IB_IP_PS_MASK).
const serviceIDPSMask = 0xffffffffffff0000

// ServiceIDFor returns the service ID of port in the rdma_cm port space ps
// (cma_get_service_id: ps<<16 + port).
func ServiceIDFor(ps, port uint16) uint64 { return uint64(ps)<<16 | uint64(port) }

// ServiceID returns the service ID of a port in the RDMA_PS_TCP port space,
// which rdma_cm users such as NVMe-oF use: 0x0000000001060000 | port
// (4420 gives 0x0000000001061144).
func ServiceID(port uint16) uint64 { return ServiceIDFor(RDMAPSTCP, port) }

// PortFromServiceID returns the port of an RDMA_PS_TCP service ID, and
// false for a service ID outside that port space.
func PortFromServiceID(id uint64) (uint16, bool) {
	if id&serviceIDPSMask != uint64(RDMAPSTCP)<<16 {
		return 0, false
	}
	return uint16(id), true
}

// CMAHdrLen is the length of struct cma_hdr.
const CMAHdrLen = 36

// CMAVersion is the only rdma_cm header version (CMA_VERSION).
const CMAVersion = 0

// CMAHdr is a view of the rdma_cm header (struct cma_hdr) at the start of a
// REQ's private data: version, IP version in the high nibble of byte 1, the
// active side's port, and the source and destination addresses (16 bytes
// each; an IPv4 address in the last 4, after 12 zero bytes).
type CMAHdr []byte

// ParseCMAHdr returns a view of the rdma_cm header at the start of b (the
// REQ private data). It checks the length, the version (0) and the IP
// version (4 or 6), as cma.c does before it accepts a REQ.
func ParseCMAHdr(b []byte) (CMAHdr, error) {
	if len(b) < CMAHdrLen {
		return nil, fmt.Errorf("wire: %d-byte rdma_cm header: %w", len(b), ErrShort)
	}
	h := CMAHdr(b[:CMAHdrLen:CMAHdrLen])
	if v := h.Version(); v != CMAVersion {
		return nil, fmt.Errorf("wire: rdma_cm header version %d, want %d", v, CMAVersion)
	}
	if v := h.IPVersion(); v != 4 && v != 6 {
		return nil, fmt.Errorf("wire: rdma_cm header IP version %d", v)
	}
	return h, nil
}

// Version returns the rdma_cm header version (cma_version).
func (h CMAHdr) Version() uint8 { return h[0] }

// IPVersion returns the IP version, 4 or 6 (high nibble of byte 1).
func (h CMAHdr) IPVersion() uint8 { return h[1] >> 4 }

// Port returns the active side's port.
func (h CMAHdr) Port() uint16 { return binary.BigEndian.Uint16(h[2:]) }

// SrcAddrRaw returns the 16-byte source address field.
func (h CMAHdr) SrcAddrRaw() []byte { return h[4:20:20] }

// DstAddrRaw returns the 16-byte destination address field.
func (h CMAHdr) DstAddrRaw() []byte { return h[20:36:36] }

// SrcAddr returns the active side's IP address, read as IPv4 or IPv6 by IPVersion.
func (h CMAHdr) SrcAddr() netip.Addr { return h.addr(h.SrcAddrRaw()) }

// DstAddr returns the passive side's IP address, read as IPv4 or IPv6 by IPVersion.
func (h CMAHdr) DstAddr() netip.Addr { return h.addr(h.DstAddrRaw()) }

func (h CMAHdr) addr(f []byte) netip.Addr {
	switch h.IPVersion() {
	case 4:
		return netip.AddrFrom4([4]byte(f[12:16]))
	case 6:
		return netip.AddrFrom16([16]byte(f))
	}
	return netip.Addr{}
}

// SetVersion sets the rdma_cm header version.
func (h CMAHdr) SetVersion(v uint8) { h[0] = v }

// SetIPVersion sets the IP version nibble (the low nibble is zeroed, as
// cma_set_ip_ver leaves it).
func (h CMAHdr) SetIPVersion(v uint8) { h[1] = v << 4 }

// SetPort sets the active side's port.
func (h CMAHdr) SetPort(v uint16) { binary.BigEndian.PutUint16(h[2:], v) }

// SetAddrs writes the version (0), the IP version and both addresses, which
// must be of one family. IPv4-mapped IPv6 addresses are IPv6 here, as for
// an AF_INET6 rdma_cm ID; Unmap them to send an IPv4 header.
func (h CMAHdr) SetAddrs(src, dst netip.Addr) error {
	if !src.IsValid() || !dst.IsValid() || src.Is4() != dst.Is4() {
		return fmt.Errorf("wire: rdma_cm header addresses %v and %v: not one IP family", src, dst)
	}
	h.SetVersion(CMAVersion)
	ver := uint8(6)
	if src.Is4() {
		ver = 4
	}
	h.SetIPVersion(ver)
	putCMAAddr(h.SrcAddrRaw(), src)
	putCMAAddr(h.DstAddrRaw(), dst)
	return nil
}

func putCMAAddr(f []byte, a netip.Addr) {
	if a.Is4() {
		clear(f[:12])
		a4 := a.As4()
		copy(f[12:], a4[:])
		return
	}
	a16 := a.As16()
	copy(f, a16[:])
}

// String formats the header for logs.
func (h CMAHdr) String() string {
	if len(h) < CMAHdrLen {
		return "cma_hdr(short)"
	}
	return fmt.Sprintf("cma_hdr{v%d ipv%d port %d %v -> %v}", h.Version(), h.IPVersion(), h.Port(), h.SrcAddr(), h.DstAddr())
}
