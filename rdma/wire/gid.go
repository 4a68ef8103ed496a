package wire

import "net/netip"

// GID is a 128-bit InfiniBand global identifier. On RoCEv2 a port's GID is
// its IP address: an IPv6 address, or an IPv4 address as the IPv4-mapped
// IPv6 address ::ffff:a.b.c.d.
type GID [16]byte

// GIDFromAddr returns the GID of an IP address: IPv4 addresses map to
// ::ffff:a.b.c.d, IPv6 addresses are taken as they are (without zone). The
// zero netip.Addr gives the zero GID.
func GIDFromAddr(a netip.Addr) GID {
	if !a.IsValid() {
		return GID{}
	}
	return GID(a.As16())
}

// Addr returns the IP address of the GID: an IPv4 address for an
// IPv4-mapped GID, else the IPv6 address.
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

// IsZero reports whether the GID is all zeros (an unused path).
func (g GID) IsZero() bool { return g == GID{} }

// String formats the GID as RFC 5952 IPv6 text, IPv4-mapped GIDs as
// ::ffff:a.b.c.d (as the decode oracle and Linux's %pI6c print them).
func (g GID) String() string { return netip.AddrFrom16(g).String() }
