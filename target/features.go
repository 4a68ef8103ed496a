package target

import (
	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// Defaults of the features a controller keeps.
const (
	// defaultTempThreshold is the over-temperature threshold of the
	// composite temperature (Kelvin), also reported as WCTEMP.
	defaultTempThreshold = 343
	// criticalTemp is CCTEMP (Kelvin).
	criticalTemp = 358
	// reportedTemp is the composite temperature a backend without health
	// data reports (35 °C).
	reportedTemp = 308
)

// featureSupported reports whether fid is implemented, and whether Set
// Features may change it.
func (c *controller) featureSupported(fid nvme.FeatureID) (ok, changeable bool) {
	if c.subsys.disc {
		switch fid {
		case nvme.FeatKeepAliveTimer, nvme.FeatAsyncEventConfig:
			return true, true
		}
		return false, false
	}
	switch fid {
	case nvme.FeatArbitration, nvme.FeatPowerManagement, nvme.FeatTemperatureThreshold,
		nvme.FeatVolatileWriteCache, nvme.FeatNumberOfQueues, nvme.FeatAsyncEventConfig,
		nvme.FeatKeepAliveTimer:
		return true, true
	case nvme.FeatHostIdentifier:
		return true, false
	case nvme.FeatReservationNotifMask, nvme.FeatReservationPersistence:
		return true, true
	}
	return false, false
}

// setFeatures runs Set Features (Linux nvmet_execute_set_features).
func (c *controller) setFeatures(q *queue, r *fabrics.Request) {
	cmd := nvme.FeaturesCommand{SQE: nvme.SQE(r.SQE[:])}
	fid := cmd.FID()
	cdw11 := cmd.CDW11()
	ok, changeable := c.featureSupported(fid)
	if !ok {
		q.complete(r, dnr(nvme.StatusInvalidField), locCDW10, 0)
		return
	}
	if fid == nvme.FeatHostIdentifier || !changeable {
		// Fabrics hosts give their identifier in Connect (Linux).
		q.complete(r, dnr(nvme.StatusCommandSequenceError), locCDW10, 0)
		return
	}
	if !q.checkLen(r, 0) {
		return
	}
	if cmd.SV() {
		q.complete(r, dnr(nvme.StatusFeatureNotSaveable), locCDW10, 0)
		return
	}
	if resvFeature(fid) {
		c.setResvFeature(q, r, cmd)
		return
	}
	cqe := nvme.CQE(r.CQE[:])
	c.mu.Lock()
	switch fid {
	case nvme.FeatArbitration:
		c.arb = cdw11
	case nvme.FeatPowerManagement:
		if cdw11&0x1f != 0 { // only power state 0 (NPSS 0)
			c.mu.Unlock()
			q.complete(r, dnr(nvme.StatusInvalidField), locCDW11, 0)
			return
		}
		c.power = cdw11 & 0xff
	case nvme.FeatTemperatureThreshold:
		// Only the composite temperature's thresholds are kept.
		if tmpsel := cdw11 >> 16 & 0xf; tmpsel != 0 || cdw11>>20&3 > 1 {
			c.mu.Unlock()
			q.complete(r, dnr(nvme.StatusInvalidField), locCDW11, 0)
			return
		}
	case nvme.FeatVolatileWriteCache:
		c.vwc.Store(cdw11&nvme.VWCEnable != 0)
	case nvme.FeatNumberOfQueues:
		nsqr, ncqr := cdw11&0xffff, cdw11>>16
		if nsqr == 0xffff || ncqr == 0xffff {
			c.mu.Unlock()
			q.complete(r, dnr(nvme.StatusInvalidField), locCDW11, 0)
			return
		}
		for _, ioq := range c.queues[1:] {
			if ioq != nil {
				c.mu.Unlock()
				q.complete(r, dnr(nvme.StatusCommandSequenceError), locCDW10, 0)
				return
			}
		}
		nsq := min(nsqr+1, uint32(c.maxIOQs))
		ncq := min(ncqr+1, uint32(c.maxIOQs))
		c.grantedQ = uint16(min(nsq, ncq))
		cqe.SetDW0(nvme.MakeNumQueues(nsq, ncq))
	case nvme.FeatAsyncEventConfig:
		mask := uint32(aenCfgAll)
		if c.subsys.disc {
			mask = aenCfgDisc
		}
		if cdw11&^mask != 0 {
			c.mu.Unlock()
			q.complete(r, dnr(nvme.StatusInvalidField), locCDW11, 0)
			return
		}
		c.aen = cdw11
		cqe.SetDW0(cdw11)
		if cdw11&nvme.AECSMARTMask != 0 {
			defer c.t.wakeHealthPoller() // after c.mu is released
		}
	case nvme.FeatKeepAliveTimer:
		cqe.SetDW0(c.setKATOLocked(cdw11))
	}
	c.mu.Unlock()
	q.ok(r)
}

// getFeatures runs Get Features; SEL is honoured (saved values are the
// defaults, nothing being saveable).
func (c *controller) getFeatures(q *queue, r *fabrics.Request) {
	cmd := nvme.FeaturesCommand{SQE: nvme.SQE(r.SQE[:])}
	fid := cmd.FID()
	ok, changeable := c.featureSupported(fid)
	if !ok {
		q.complete(r, dnr(nvme.StatusInvalidField), locCDW10, 0)
		return
	}
	sel := cmd.SEL()
	if sel > nvme.SelectSupportedCapabilities {
		q.complete(r, dnr(nvme.StatusInvalidField), locCDW10, 0)
		return
	}
	want := 0
	if fid == nvme.FeatHostIdentifier && sel != nvme.SelectSupportedCapabilities {
		want = hostIDFeatSize
	}
	if !q.checkLen(r, want) {
		return
	}
	cqe := nvme.CQE(r.CQE[:])
	if sel == nvme.SelectSupportedCapabilities {
		var v uint32
		if changeable {
			v |= nvme.FeatureCapChangeable
		}
		if resvFeature(fid) {
			v |= nvme.FeatureCapNamespaceSpecific
		}
		cqe.SetDW0(v)
		q.ok(r)
		return
	}
	if resvFeature(fid) {
		c.getResvFeature(q, r, cmd)
		return
	}
	cur := sel == nvme.SelectCurrent
	cdw11 := cmd.CDW11()
	var v uint32
	c.mu.Lock()
	switch fid {
	case nvme.FeatArbitration:
		if cur {
			v = c.arb
		}
	case nvme.FeatPowerManagement:
		if cur {
			v = c.power
		}
	case nvme.FeatTemperatureThreshold:
		if tmpsel, thsel := cdw11>>16&0xf, cdw11>>20&3; tmpsel != 0 || thsel > 1 {
			c.mu.Unlock()
			q.complete(r, dnr(nvme.StatusInvalidField), locCDW11, 0)
			return
		} else if thsel == 0 {
			v = defaultTempThreshold
		}
	case nvme.FeatVolatileWriteCache:
		if !cur || c.vwc.Load() {
			v = nvme.VWCEnable
		}
	case nvme.FeatNumberOfQueues:
		n := uint32(c.maxIOQs)
		if cur {
			n = uint32(c.grantedIOQueuesLocked())
		}
		v = nvme.MakeNumQueues(n, n)
	case nvme.FeatAsyncEventConfig:
		v = aenCfgOptional
		if cur {
			v = c.aen
		}
	case nvme.FeatKeepAliveTimer:
		if cur {
			v = uint32(c.kato.Milliseconds())
		}
	case nvme.FeatHostIdentifier:
		if cdw11&nvme.HostIDExtended == 0 {
			c.mu.Unlock()
			q.complete(r, dnr(nvme.StatusInvalidField), locCDW11, 0)
			return
		}
		copy(r.Data, c.hostID[:])
	}
	c.mu.Unlock()
	cqe.SetDW0(v)
	q.ok(r)
}
