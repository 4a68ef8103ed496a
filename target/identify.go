package target

import (
	"encoding/binary"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// identify runs Identify (Linux nvmet_execute_identify).
func (c *controller) identify(q *queue, r *fabrics.Request) {
	if !q.checkLen(r, nvme.IdentifyDataSize) {
		return
	}
	clear(r.Data)
	cmd := nvme.IdentifyCommand{SQE: nvme.SQE(r.SQE[:])}
	cns := cmd.CNS()
	if c.subsys.disc && cns != nvme.CNSController {
		q.complete(r, dnr(nvme.StatusInvalidField), locCDW10, 0)
		return
	}
	var s nvme.Error
	switch cns {
	case nvme.CNSNamespace:
		s = c.identifyNamespace(r, cmd.NSID())
	case nvme.CNSController:
		c.identifyController(q, r)
	case nvme.CNSActiveNSList:
		s = c.identifyNSList(r, cmd.NSID(), false, 0)
	case nvme.CNSCSActiveNSList:
		s = c.identifyNSList(r, cmd.NSID(), true, cmd.CSI())
	case nvme.CNSNSDescriptorList:
		s = c.identifyDescriptors(r, cmd.NSID())
	case nvme.CNSCSNamespace:
		// NVM command set specific: nothing to report (zeroes), as Linux
		// for non-block backends.
		switch {
		case cmd.CSI() != nvme.CSINVM:
			s = dnr(nvme.StatusInvalidField)
		case c.subsys.activeNamespace(cmd.NSID()) == nil:
			s = dnr(nvme.StatusInvalidNamespaceOrFormat)
		}
	case nvme.CNSCSController:
		if cmd.CSI() != nvme.CSINVM {
			s = dnr(nvme.StatusInvalidField)
		}
	case nvme.CNSCSIndependentNamespace:
		s = c.identifyCSIndependent(r, cmd.NSID())
	default:
		s = dnr(nvme.StatusInvalidField)
	}
	switch {
	case s.Status.Success():
		q.ok(r)
	case s.Status == nvme.StatusInvalidNamespaceOrFormat:
		q.complete(r, s, locNSID, 0)
	default:
		q.complete(r, s, locCDW10, 0)
	}
}

// identifyController fills the Identify Controller data structure with
// what a fabrics controller reports (Linux nvmet_execute_identify_ctrl and
// nvmet_execute_disc_identify).
func (c *controller) identifyController(q *queue, r *fabrics.Request) {
	id := nvme.IdentifyController(r.Data)
	t := c.t
	t.mu.RLock()
	cfg := c.subsys.cfg
	pcfg := c.port.cfg
	t.mu.RUnlock()

	_ = id.SetSN(cfg.Serial)
	_ = id.SetMN(cfg.Model)
	_ = id.SetFR(cfg.FirmwareRevision)
	_ = id.SetSUBNQN(c.subsys.nqn)
	id.SetCNTLID(c.cntlid)
	id.SetVER(uint32(cfg.Version))
	id.SetMAXCMD(c.mqes + 1)
	id.SetAERL(asyncEvents - 1)
	id.SetKAS(kasUnits)

	sgls := uint32(nvme.SGLSSupported)
	if pcfg.Address.Transport == fabrics.TransportRDMA {
		sgls |= nvme.SGLSKeyed
	}
	if pcfg.InlineDataSize > 0 {
		sgls |= nvme.SGLSOffset
	}
	id.SetSGLS(sgls)

	if c.subsys.disc {
		id.SetCNTRLTYPE(nvme.ControllerTypeDiscovery)
		id.SetLPA(nvme.LPAExtendedData)
		id.SetOAES(nvme.AECDiscoveryLogPageChange)
		return
	}

	id.SetRAB(6)
	id.SetIEEE(cfg.IEEEOUI)
	id.SetCMIC(nvme.CMICMultiPort | nvme.CMICMultiCtrl | nvme.CMICANAReporting)
	id.SetMDTS(c.mdts)
	id.SetOAES(nvme.AECNamespaceAttribute | nvme.AECANAChange)
	id.SetANATT(anaTransitionTime)
	id.SetANACAP(anaCapabilities)
	id.SetANAGRPMAX(MaxANAGroups)
	id.SetNANAGRPID(MaxANAGroups)
	id.SetCTRATT(nvme.CTRATTHostID128 | nvme.CTRATTTBKAS)
	id.SetCNTRLTYPE(nvme.ControllerTypeIO)
	id.SetACL(3)
	id.SetFRMW(1<<0 | 1<<1) // slot 1 read-only, one slot
	id.SetLPA(nvme.LPASMARTPerNamespace | nvme.LPACommandEffects | nvme.LPAExtendedData)
	id.SetELPE(errLogSlots - 1)
	id.SetNPSS(0)
	id.SetWCTEMP(defaultTempThreshold)
	id.SetCCTEMP(criticalTemp)
	id.SetSQES(6<<4 | 6)
	id.SetCQES(4<<4 | 4)
	id.SetNN(c.subsys.table().nn)
	id.SetMNAN(MaxNamespaces)
	// Reservations: set as Linux does; each namespace's RESCAP says whether
	// it has them (resv_enable).
	id.SetONCS(nvme.ONCSCompare | nvme.ONCSDatasetManagement | nvme.ONCSWriteZeroes | nvme.ONCSReservations | nvme.ONCSVerify)
	// A volatile write cache is reported present, as Linux does: the
	// namespaces behind the controller may change after the host read
	// this, and Flush is harmless on backends without one. Bits 2:1 =
	// 11b: Flush with NSID FFFFFFFFh is supported.
	id.SetVWC(nvme.VWCPresent | 3<<1)
	id.SetIOCCSZ(uint32(nvme.SQESize+pcfg.InlineDataSize) / 16)
	id.SetIORCSZ(nvme.CQESize / 16)
	id.SetICDOFF(0)
	id.SetMSDBD(1)
	id.SetOFCS(nvme.OFCSDisconnect)
	// Power state 0, the values Linux copies from qemu.
	ps := id.PowerState(0)
	ps.SetMP(0x9c4)
	ps.SetENLAT(0x10)
	ps.SetEXLAT(0x4)
}

// identifyNamespace fills Identify Namespace. An NSID in range without an
// active namespace gets a zeroed structure (Linux); 0, FFFFFFFFh and NSIDs
// above NN are invalid (Linux: FFFFFFFFh only).
func (c *controller) identifyNamespace(r *fabrics.Request, nsid uint32) nvme.Error {
	if nsid == 0 || nsid > c.subsys.table().nn {
		return dnr(nvme.StatusInvalidNamespaceOrFormat)
	}
	ns := c.subsys.activeNamespace(nsid)
	if ns == nil {
		return nvme.Error{}
	}
	id := nvme.IdentifyNamespace(r.Data)
	n := ns.nblocks.Load()
	id.SetNSZE(n)
	id.SetNCAP(n)
	// A group the port cannot reach reports no blocks in use (Linux).
	grp := ns.anagrp.Load()
	switch c.port.ana.Load().state(grp) {
	case nvme.ANAInaccessible, nvme.ANAPersistentLoss:
	default:
		id.SetNUSE(n)
	}
	id.SetANAGRPID(grp)
	dlfeat := uint8(1 << 3) // Write Zeroes may deallocate
	if ns.readsZeroes {
		dlfeat |= 1 // deallocated blocks read as zeroes
	}
	id.SetDLFEAT(dlfeat)
	id.SetNLBAF(0)
	id.SetFLBAS(0)
	id.SetLBAF(0, nvme.LBAFormat{LBADS: ns.bsShift})
	id.SetNMIC(nvme.NMICShared)
	if ns.ro {
		id.SetNSATTR(nvme.NSATTRWriteProtected)
	}
	if ns.pr != nil {
		id.SetRESCAP(ns.pr.rescap())
	}
	id.SetNGUID(ns.nguid)
	id.SetEUI64(ns.eui64)
	return nvme.Error{}
}

// identifyNSList returns the active NSIDs above nsid (CNS 02h, or 07h for
// one command set).
func (c *controller) identifyNSList(r *fabrics.Request, nsid uint32, bycsi bool, csi uint8) nvme.Error {
	if nsid >= 0xfffffffe {
		return dnr(nvme.StatusInvalidNamespaceOrFormat)
	}
	if bycsi && csi != nvme.CSINVM {
		return nvme.Error{} // every namespace is NVM: an empty list
	}
	ids := make([]uint32, 0, 16)
	for _, ns := range c.subsys.table().active {
		if ns.nsid > nsid {
			ids = append(ids, ns.nsid)
			if len(ids) == nvme.MaxNSIDListEntries {
				break
			}
		}
	}
	if err := nvme.EncodeNSIDList(r.Data, ids); err != nil {
		c.log.Error("encode namespace list", "err", err)
		return dnr(nvme.StatusInternalError)
	}
	return nvme.Error{}
}

// identifyDescriptors returns the Namespace Identification Descriptor
// list: EUI64 and NGUID when set, the UUID, and the command set.
func (c *controller) identifyDescriptors(r *fabrics.Request, nsid uint32) nvme.Error {
	ns := c.subsys.activeNamespace(nsid)
	if ns == nil {
		return dnr(nvme.StatusInvalidNamespaceOrFormat)
	}
	ds := make([]nvme.NSDescriptor, 0, 4)
	if ns.eui64 != ([8]byte{}) {
		ds = append(ds, nvme.NSDescriptorEUI64(ns.eui64))
	}
	if ns.nguid != ([16]byte{}) {
		ds = append(ds, nvme.NSDescriptorNGUID(ns.nguid))
	}
	ds = append(ds, nvme.NSDescriptorUUID(ns.uuid), nvme.NSDescriptorCSI(nvme.CSINVM))
	if _, err := nvme.EncodeNSDescriptors(r.Data, ds); err != nil {
		c.log.Error("encode namespace descriptors", "err", err)
		return dnr(nvme.StatusInternalError)
	}
	return nvme.Error{}
}

// Offsets of the I/O Command Set Independent Identify Namespace structure
// (CNS 08h; Linux struct nvme_id_ns_cs_indep).
const (
	csiNSFEAT   = 0
	csiNMIC     = 1
	csiANAGRPID = 4
	csiNSATTR   = 8
	csiNSTAT    = 14
)

func (c *controller) identifyCSIndependent(r *fabrics.Request, nsid uint32) nvme.Error {
	ns := c.subsys.activeNamespace(nsid)
	if ns == nil {
		return dnr(nvme.StatusInvalidNamespaceOrFormat)
	}
	b := r.Data
	b[csiNMIC] = nvme.NMICShared
	if ns.ro {
		b[csiNSATTR] = nvme.NSATTRWriteProtected
	}
	b[csiNSTAT] = 1 // namespace ready
	binary.LittleEndian.PutUint32(b[csiANAGRPID:], ns.anagrp.Load())
	return nvme.Error{}
}
