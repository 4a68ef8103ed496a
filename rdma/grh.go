package rdma

import (
	"fmt"
	"net/netip"
)

// GRHAddrs returns the source and destination IP addresses of the 40-byte
// GRH a UD receive buffer starts with (WCGRH). On RoCEv2 over IPv4 the
// first 20 bytes are zero and the last 20 hold the IPv4 header (as Linux
// rxe and mlx5 write it); otherwise the GRH is an IPv6 header whose GIDs
// are the addresses.
func GRHAddrs(grh []byte) (src, dst netip.Addr, err error) {
	if len(grh) < GRHLen {
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("rdma: %d-byte GRH: %w", len(grh), ErrInvalidArgument)
	}
	if grh[20]>>4 == 4 && allZero(grh[:20]) {
		return netip.AddrFrom4([4]byte(grh[32:36])), netip.AddrFrom4([4]byte(grh[36:40])), nil
	}
	if grh[0]>>4 != 6 {
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("rdma: GRH IP version %d: %w", grh[0]>>4, ErrInvalidArgument)
	}
	return netip.AddrFrom16([16]byte(grh[8:24])).Unmap(), netip.AddrFrom16([16]byte(grh[24:40])).Unmap(), nil
}

func allZero(b []byte) bool {
	for _, v := range b {
		if v != 0 {
			return false
		}
	}
	return true
}
