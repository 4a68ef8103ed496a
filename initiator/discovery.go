package initiator

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/nvmeof/nvmeof/fabrics"
)

// maxDiscoveryRetries bounds the re-reads of a discovery log page whose
// generation counter keeps changing (nvme-cli MAX_DISC_RETRIES).
const maxDiscoveryRetries = 10

// maxDiscoveryRecords bounds the records the host reads (64 MiB).
const maxDiscoveryRecords = 1 << 16

// DiscoveryEntry is one record of a discovery log page.
type DiscoveryEntry struct {
	fabrics.DiscoveryRecord
}

// Address returns the entry's port as an address Connect takes. The loop
// transport has no address; it keeps the discovery controller's.
func (e DiscoveryEntry) Address() (fabrics.Address, error) {
	var a fabrics.Address
	switch e.TRType {
	case fabrics.TRTypeRDMA:
		a.Transport = fabrics.TransportRDMA
	case fabrics.TRTypeTCP:
		a.Transport = fabrics.TransportTCP
	case fabrics.TRTypeLoop:
		a.Transport = fabrics.TransportLoop
	default:
		return a, fmt.Errorf("initiator: discovery entry %s: unsupported transport %v", e.SubNQN, e.TRType)
	}
	if e.TRADDR != "" {
		ip, err := netip.ParseAddr(e.TRADDR)
		if err != nil {
			return a, fmt.Errorf("initiator: discovery entry %s: traddr %q: %w", e.SubNQN, e.TRADDR, err)
		}
		a.Addr = ip
	}
	a.ServiceID = fabrics.DefaultServiceID
	if e.TRSVCID != "" {
		port, err := strconv.ParseUint(e.TRSVCID, 10, 16)
		if err != nil {
			return a, fmt.Errorf("initiator: discovery entry %s: trsvcid %q: %w", e.SubNQN, e.TRSVCID, err)
		}
		a.ServiceID = uint16(port)
	}
	return a, nil
}

// Discover connects to the discovery controller at addr, reads its
// discovery log page and disconnects (nvme-cli discover). opts.SubsystemNQN
// defaults to the well-known discovery NQN.
func Discover(ctx context.Context, d fabrics.Dialer, addr fabrics.Address, opts Options) ([]DiscoveryEntry, error) {
	if opts.SubsystemNQN == "" {
		opts.SubsystemNQN = fabrics.DiscoveryNQN
	}
	c, err := Connect(ctx, d, addr, opts)
	if err != nil {
		return nil, err
	}
	entries, err := c.DiscoveryLog(ctx)
	if derr := c.Disconnect(ctx); err == nil && derr != nil {
		c.log.Warn("disconnect from the discovery controller failed", "error", derr)
	}
	return entries, err
}

// DiscoveryLog reads the discovery log page (LID 70h) as libnvme's
// nvme_discovery_log does: the header, then the header and all records,
// then the header again, re-reading while the generation counter changes.
func (c *Controller) DiscoveryLog(ctx context.Context) ([]DiscoveryEntry, error) {
	a, err := c.liveAssoc(ctx)
	if err != nil {
		return nil, err
	}
	hdr := make([]byte, fabrics.DiscoveryHeaderLen)
	if err := c.getLogPage(ctx, a, fabrics.LogPageDiscovery, 0, 0, true, hdr); err != nil {
		return nil, fmt.Errorf("initiator: %s: discovery log header: %w", c.addr, err)
	}
	for range maxDiscoveryRetries {
		h, err := fabrics.ParseDiscoveryHeader(hdr)
		if err != nil {
			return nil, err
		}
		gen, numrec := h.GenCtr(), h.NumRec()
		if numrec > maxDiscoveryRecords {
			return nil, fmt.Errorf("initiator: %s: discovery log claims %d records", c.addr, numrec)
		}
		page := hdr
		if numrec > 0 {
			page = make([]byte, fabrics.DiscoveryHeaderLen+int(numrec)*fabrics.DiscoveryEntryLen)
			if err := c.getLogPage(ctx, a, fabrics.LogPageDiscovery, 0, 0, true, page); err != nil {
				return nil, fmt.Errorf("initiator: %s: discovery log: %w", c.addr, err)
			}
		}
		hdr = make([]byte, fabrics.DiscoveryHeaderLen)
		if err := c.getLogPage(ctx, a, fabrics.LogPageDiscovery, 0, 0, false, hdr); err != nil {
			return nil, fmt.Errorf("initiator: %s: discovery log header: %w", c.addr, err)
		}
		h2, err := fabrics.ParseDiscoveryHeader(hdr)
		if err != nil {
			return nil, err
		}
		if h2.GenCtr() != gen || h2.NumRec() != numrec {
			c.log.Debug("discovery log changed while reading, reading again", "genctr", gen, "new_genctr", h2.GenCtr())
			continue
		}
		l, err := fabrics.ParseDiscoveryLog(page)
		if err != nil {
			return nil, fmt.Errorf("initiator: %s: discovery log: %w", c.addr, err)
		}
		out := make([]DiscoveryEntry, len(l.Entries))
		for i, r := range l.Entries {
			out[i] = DiscoveryEntry{r}
		}
		return out, nil
	}
	return nil, fmt.Errorf("initiator: %s: discovery log kept changing over %d reads", c.addr, maxDiscoveryRetries)
}
