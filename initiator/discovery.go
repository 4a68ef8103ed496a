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

// DefaultMaxDiscoveryRecords is the most records DiscoveryLog reads
// unless Options.MaxDiscoveryRecords says otherwise: 4 MiB of log page,
// far more than a discovery controller lists for one host (Linux nvmet:
// one record per port and subsystem the host may use). A larger NUMREC
// fails the read instead of making the host allocate for it (a hostile
// NUMREC of 65,536 and a GENCTR changing at every read peaked at about
// 200 MiB of heap).
const DefaultMaxDiscoveryRecords = 4096

// discoveryPageRecords is how many records one Get Log Page of the
// discovery log reads (64 KiB, less if the admin transfer limit is
// smaller): the host holds one such piece, not the whole page.
const discoveryPageRecords = 64

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
// nvme_discovery_log does: the header, the records (from offset 1024, in
// pieces of discoveryPageRecords), then the header again, reading again
// while the generation counter changes, at most maxDiscoveryRetries
// times. A NUMREC above Options.MaxDiscoveryRecords fails the read. The
// records are decoded piece by piece into the result, whose slice is
// reused by a re-read, so what the host holds is bounded by the records
// it accepts, whatever NUMREC and GENCTR the controller reports.
func (c *Controller) DiscoveryLog(ctx context.Context) ([]DiscoveryEntry, error) {
	a, err := c.liveAssoc(ctx)
	if err != nil {
		return nil, err
	}
	limit := c.opts.MaxDiscoveryRecords
	if limit <= 0 {
		limit = DefaultMaxDiscoveryRecords
	}
	per := discoveryPageRecords
	if a.adminXfer > 0 {
		per = max(1, min(per, a.adminXfer/fabrics.DiscoveryEntryLen))
	}
	hdr := make([]byte, fabrics.DiscoveryHeaderLen)
	piece := make([]byte, per*fabrics.DiscoveryEntryLen)
	var out []DiscoveryEntry
	if err := c.getLogPage(ctx, a, fabrics.LogPageDiscovery, 0, 0, true, hdr); err != nil {
		return nil, fmt.Errorf("initiator: %s: discovery log header: %w", c.addr, err)
	}
	for range maxDiscoveryRetries {
		h, err := fabrics.ParseDiscoveryHeader(hdr)
		if err != nil {
			return nil, fmt.Errorf("initiator: %s: discovery log header: %w", c.addr, err)
		}
		gen, numrec := h.GenCtr(), h.NumRec()
		if numrec > uint64(limit) {
			return nil, fmt.Errorf("initiator: %s: discovery log claims %d records, more than the %d this host reads: %w", c.addr, numrec, limit, ErrDiscoveryTooLarge)
		}
		out = out[:0]
		for done := 0; done < int(numrec); {
			n := min(per, int(numrec)-done)
			b := piece[:n*fabrics.DiscoveryEntryLen]
			lpo := uint64(fabrics.DiscoveryHeaderLen + done*fabrics.DiscoveryEntryLen)
			if err := c.getLogPageAt(ctx, a, fabrics.LogPageDiscovery, 0, 0, true, lpo, b); err != nil {
				return nil, fmt.Errorf("initiator: %s: discovery log records %d..%d: %w", c.addr, done, done+n-1, err)
			}
			for i := range n {
				e := fabrics.DiscoveryEntry(b[i*fabrics.DiscoveryEntryLen : (i+1)*fabrics.DiscoveryEntryLen])
				out = append(out, DiscoveryEntry{e.Record()})
			}
			done += n
		}
		if err := c.getLogPage(ctx, a, fabrics.LogPageDiscovery, 0, 0, false, hdr); err != nil {
			return nil, fmt.Errorf("initiator: %s: discovery log header: %w", c.addr, err)
		}
		h2, err := fabrics.ParseDiscoveryHeader(hdr)
		if err != nil {
			return nil, fmt.Errorf("initiator: %s: discovery log header: %w", c.addr, err)
		}
		if h2.GenCtr() != gen || h2.NumRec() != numrec {
			c.log.Debug("discovery log changed while reading, reading again", "genctr", gen, "new_genctr", h2.GenCtr())
			continue
		}
		return out, nil
	}
	return nil, fmt.Errorf("initiator: %s: discovery log kept changing over %d reads", c.addr, maxDiscoveryRetries)
}
