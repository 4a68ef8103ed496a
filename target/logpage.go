package target

import (
	"encoding/binary"
	"errors"
	"strconv"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/internal/iostats"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/target/bdev"
)

// getLogPage runs Get Log Page. Every log is built whole, then the host's
// window (LPO, NUMD) is copied out: an offset that is not a multiple of 4
// or lies beyond the log is Invalid Field, and what the log does not fill
// reads as zeroes (Linux nvmet_execute_disc_get_log_page).
func (c *controller) getLogPage(q *queue, r *fabrics.Request) {
	cmd := nvme.GetLogPageCommand{SQE: nvme.SQE(r.SQE[:])}
	if uint64(len(r.Data)) != cmd.Length() {
		q.complete(r, dnr(nvme.StatusDataSGLLengthInvalid), locDPTR, 0)
		return
	}
	lid := cmd.LID()
	if cmd.OT() {
		q.complete(r, dnr(nvme.StatusInvalidField), locCDW10+16, 0) // CDW14
		return
	}
	if cmd.LPO()&3 != 0 {
		q.complete(r, dnr(nvme.StatusInvalidField), locLPO, 0)
		return
	}
	if c.subsys.disc {
		if lid != nvme.LIDDiscovery {
			q.complete(r, dnr(nvme.StatusInvalidField), locCDW10, 0)
			return
		}
		page := c.discoveryLog()
		if s := copyLog(r.Data, page, cmd.LPO()); !s.Status.Success() {
			q.complete(r, s, locLPO, 0)
			return
		}
		if !cmd.RAE() {
			c.mu.Lock()
			c.clearAENLocked(aenBitDisc)
			c.mu.Unlock()
		}
		q.ok(r)
		return
	}

	var page []byte
	switch lid {
	case nvme.LIDSupportedLogPages:
		page = make([]byte, 1024)
		for _, l := range []nvme.LogPageID{nvme.LIDSupportedLogPages, nvme.LIDError, nvme.LIDSMART,
			nvme.LIDFirmwareSlot, nvme.LIDChangedNSList, nvme.LIDCommandEffects, nvme.LIDANA, nvme.LIDReservationNotification} {
			binary.LittleEndian.PutUint32(page[4*int(l):], 1) // LSUPP
		}
	case nvme.LIDError:
		page = c.errorLog()
	case nvme.LIDSMART:
		c.smartLog(q, r, cmd)
		return
	case nvme.LIDFirmwareSlot:
		page = make([]byte, nvme.FirmwareSlotLogSize)
		fw := nvme.FirmwareSlotLog(page)
		fw.SetActiveSlot(1)
		c.t.mu.RLock()
		_ = fw.SetFRS(1, c.subsys.cfg.FirmwareRevision)
		c.t.mu.RUnlock()
	case nvme.LIDChangedNSList:
		c.changedNSLog(q, r, cmd)
		return
	case nvme.LIDCommandEffects:
		if cmd.CSI() != nvme.CSINVM {
			q.complete(r, st(nvme.StatusInvalidLogPage), locCDW10+16, 0)
			return
		}
		page = commandEffects()
	case nvme.LIDReservationNotification:
		page = c.resvLogPage(cmd.RAE())
	case nvme.LIDANA:
		var err error
		if page, err = c.anaLog(cmd.LSP()&nvme.ANALSPRGO != 0, cmd.RAE()); err != nil {
			c.log.Error("encode ANA log", "err", err)
			q.complete(r, dnr(nvme.StatusInternalError), noLoc, 0)
			return
		}
	default:
		q.complete(r, dnr(nvme.StatusInvalidField), locCDW10, 0)
		return
	}
	if s := copyLog(r.Data, page, cmd.LPO()); !s.Status.Success() {
		q.complete(r, s, locLPO, 0)
		return
	}
	q.ok(r)
}

// copyLog copies the window of page at off into dst, zero-filling what
// the page does not cover.
func copyLog(dst, page []byte, off uint64) nvme.Error {
	if off > uint64(len(page)) {
		return dnr(nvme.StatusInvalidField)
	}
	n := copy(dst, page[off:])
	clear(dst[n:])
	return nvme.Error{}
}

// errorLog returns the Error Information log, newest entry first (Linux
// nvmet_execute_get_log_page_error).
func (c *controller) errorLog() []byte {
	page := make([]byte, errLogSlots*nvme.ErrorLogEntrySize)
	c.mu.Lock()
	slot := c.errCount % errLogSlots
	for i := range errLogSlots {
		copy(page[i*nvme.ErrorLogEntrySize:], c.errLog[slot][:])
		if slot == 0 {
			slot = errLogSlots - 1
		} else {
			slot--
		}
	}
	c.mu.Unlock()
	return page
}

// changedNSLog returns the Changed Namespace List and, unless RAE is set,
// clears it and unmasks Namespace Attribute Changed events.
func (c *controller) changedNSLog(q *queue, r *fabrics.Request, cmd nvme.GetLogPageCommand) {
	page := make([]byte, nvme.ChangedNSListLogSize)
	c.mu.Lock()
	if c.overflow {
		binary.LittleEndian.PutUint32(page, nvme.ChangedNSListOverflow)
	} else {
		for i, id := range c.changed {
			binary.LittleEndian.PutUint32(page[4*i:], id)
		}
	}
	if s := copyLog(r.Data, page, cmd.LPO()); !s.Status.Success() {
		c.mu.Unlock()
		q.complete(r, s, locLPO, 0)
		return
	}
	if !cmd.RAE() {
		c.changed = c.changed[:0]
		c.overflow = false
		c.clearAENLocked(aenBitNSAttr)
	}
	c.mu.Unlock()
	q.ok(r)
}

// commandEffects returns the Commands Supported and Effects log.
func commandEffects() []byte {
	page := make([]byte, nvme.CommandEffectsLogSize)
	l := nvme.EffectsLog(page)
	for _, op := range []nvme.AdminOpcode{nvme.AdminGetLogPage, nvme.AdminIdentify, nvme.AdminAbort,
		nvme.AdminSetFeatures, nvme.AdminGetFeatures, nvme.AdminAsyncEventRequest, nvme.AdminKeepAlive} {
		l.SetACS(op, nvme.EffectsCSUPP)
	}
	for _, op := range []nvme.IOOpcode{nvme.IORead, nvme.IOFlush, nvme.IODatasetManagement, nvme.IOCompare, nvme.IOVerify,
		nvme.IOReservationRegister, nvme.IOReservationReport, nvme.IOReservationAcquire, nvme.IOReservationRelease} {
		l.SetIOCS(op, nvme.EffectsCSUPP)
	}
	l.SetIOCS(nvme.IOWrite, nvme.EffectsCSUPP|nvme.EffectsLBCC)
	l.SetIOCS(nvme.IOWriteZeroes, nvme.EffectsCSUPP|nvme.EffectsLBCC)
	return page
}

// smartLog returns the SMART / Health log of one namespace or, for NSID
// 0 or FFFFFFFFh, of the controller (the namespaces summed). Backends
// with health data of their own (bdev.HealthReporter) supply the medium's
// fields; reading them may block, so it runs on a goroutine.
func (c *controller) smartLog(q *queue, r *fabrics.Request, cmd nvme.GetLogPageCommand) {
	nsid := cmd.NSID()
	var nss []*namespace
	if nsid == 0 || nsid == nvme.NSIDAll {
		nss = c.subsys.table().active
	} else {
		ns := c.subsys.activeNamespace(nsid)
		if ns == nil {
			q.complete(r, dnr(nvme.StatusInvalidNamespaceOrFormat), locNSID, 0)
			return
		}
		nss = []*namespace{ns}
	}
	withHealth := false
	for _, ns := range nss {
		if ns.health != nil {
			withHealth = true
		}
	}
	run := func() {
		page := c.buildSMART(nss)
		if s := copyLog(r.Data, page, cmd.LPO()); !s.Status.Success() {
			q.complete(r, s, locLPO, 0)
			return
		}
		if !cmd.RAE() {
			c.mu.Lock()
			c.aenMask &^= aenMaskSMART // SMART / Health events flow again
			c.mu.Unlock()
		}
		q.ok(r)
	}
	if withHealth {
		go run()
		return
	}
	run()
}

// dataUnits converts bytes to SMART data units: thousands of 512-byte
// units, rounded up.
func dataUnits(b uint64) uint64 { return (b/512 + 999) / 1000 }

func (c *controller) buildSMART(nss []*namespace) []byte {
	page := make([]byte, nvme.SMARTLogSize)
	l := nvme.SMARTLog(page)
	var reads, writes, rbytes, wbytes, media uint64
	var busy int64
	var h bdev.Health
	haveHealth := false
	for _, ns := range nss {
		s := &ns.stats
		reads += s.hostReads.Load()
		writes += s.hostWrites.Load()
		// The data units: the bytes the opcode counters hold (stats.go).
		rbytes += ns.io.ops[iostats.SlotRead].Bytes.Load()
		wbytes += ns.io.ops[iostats.SlotWrite].Bytes.Load()
		media += s.mediaErrors.Load()
		busy += s.busyNanos.Load()
		if ns.health == nil {
			continue
		}
		nh, err := ns.health.Health()
		if err != nil {
			// No health data from this disk (kind not supported, or it did
			// not answer): the page gets the target's own values for it.
			if !errors.Is(err, bdev.ErrNotSupported) {
				c.log.Debug("SMART / Health: backend health unavailable", "nsid", ns.nsid, "error", err)
			}
			continue
		}
		if !haveHealth {
			h, haveHealth = nh, true
			continue
		}
		h.CriticalWarning |= nh.CriticalWarning
		h.TemperatureKelvin = max(h.TemperatureKelvin, nh.TemperatureKelvin)
		h.AvailableSpare = min(h.AvailableSpare, nh.AvailableSpare)
		h.AvailableSpareThreshold = max(h.AvailableSpareThreshold, nh.AvailableSpareThreshold)
		h.PercentageUsed = max(h.PercentageUsed, nh.PercentageUsed)
		h.PowerCycles = max(h.PowerCycles, nh.PowerCycles)
		h.PowerOnHours = max(h.PowerOnHours, nh.PowerOnHours)
		h.UnsafeShutdowns += nh.UnsafeShutdowns
		h.MediaErrors += nh.MediaErrors
	}
	if !haveHealth {
		h = bdev.Health{
			AvailableSpare:          100,
			AvailableSpareThreshold: 10,
			PowerCycles:             1,
			PowerOnHours:            uint64(time.Since(epoch) / time.Hour),
		}
	}
	if h.TemperatureKelvin == 0 {
		h.TemperatureKelvin = reportedTemp
	}
	l.SetCriticalWarning(h.CriticalWarning)
	l.SetCompositeTemperature(h.TemperatureKelvin)
	l.SetAvailableSpare(h.AvailableSpare)
	l.SetAvailableSpareThreshold(h.AvailableSpareThreshold)
	l.SetPercentageUsed(h.PercentageUsed)
	l.SetDataUnitsRead(nvme.U128(dataUnits(rbytes)))
	l.SetDataUnitsWritten(nvme.U128(dataUnits(wbytes)))
	l.SetHostReadCommands(nvme.U128(reads))
	l.SetHostWriteCommands(nvme.U128(writes))
	l.SetControllerBusyTime(nvme.U128(uint64(busy / int64(time.Minute))))
	l.SetPowerCycles(nvme.U128(h.PowerCycles))
	l.SetPowerOnHours(nvme.U128(h.PowerOnHours))
	l.SetUnsafeShutdowns(nvme.U128(h.UnsafeShutdowns))
	l.SetMediaErrors(nvme.U128(media + h.MediaErrors))
	c.mu.Lock()
	l.SetErrorLogEntries(nvme.U128(c.errCount))
	c.mu.Unlock()
	l.SetTemperatureSensor(0, h.TemperatureKelvin)
	return page
}

// discoveryLog returns the discovery log page this controller's host sees
// on its port: the current discovery subsystem, then every subsystem the
// port exports that the host may use (Linux 6.1
// nvmet_execute_disc_get_log_page).
func (c *controller) discoveryLog() []byte {
	t := c.t
	t.mu.RLock()
	p := c.port
	rec := portRecord(p)
	l := fabrics.DiscoveryLog{GenCtr: t.genctr}
	cur := rec
	cur.SubType = fabrics.SubTypeCurrentDiscovery
	cur.SubNQN = t.disc.nqn
	l.Entries = append(l.Entries, cur)
	for _, nqn := range p.cfg.Subsystems {
		s := t.subsys[nqn]
		if s == nil || !s.hostAllowedLocked(c.hostNQN) {
			continue
		}
		e := rec
		e.SubType = fabrics.SubTypeNVM
		e.SubNQN = nqn
		l.Entries = append(l.Entries, e)
	}
	t.mu.RUnlock()
	page, err := l.Encode()
	if err != nil {
		c.log.Error("encode discovery log", "err", err)
		return make([]byte, fabrics.DiscoveryHeaderLen)
	}
	return page
}

// portRecord returns the discovery log entry fields of a port (t.mu held).
func portRecord(p *Port) fabrics.DiscoveryRecord {
	a := p.cfg.Address
	rec := fabrics.DiscoveryRecord{
		TREQ:    p.cfg.TREQ,
		PortID:  p.id,
		CntlID:  fabrics.CntlIDDynamic,
		ASQSZ:   discAQDepth,
		TRSVCID: strconv.Itoa(int(a.ServiceID)),
	}
	if a.Addr.IsValid() {
		addr := a.Addr.Unmap()
		rec.TRADDR = addr.String()
		rec.AdrFam = fabrics.AdrFamIPv6
		if addr.Is4() {
			rec.AdrFam = fabrics.AdrFamIPv4
		}
	}
	switch a.Transport {
	case fabrics.TransportRDMA:
		rec.TRType = fabrics.TRTypeRDMA
		rec.TSAS = fabrics.RDMATSAS(fabrics.RDMAQPTypeRC, fabrics.RDMAPRTypeNone, fabrics.RDMACMSRDMACM, 0)
	case fabrics.TransportTCP:
		rec.TRType = fabrics.TRTypeTCP
		rec.TSAS = fabrics.TCPTSAS(fabrics.TCPSecTypeNone)
	case fabrics.TransportLoop:
		rec.TRType = fabrics.TRTypeLoop
		rec.AdrFam = fabrics.AdrFamLoop
	}
	return rec
}
