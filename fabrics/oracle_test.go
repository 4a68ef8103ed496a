package fabrics_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/internal/capture"
	"github.com/nvmeof/nvmeof/nvme"
)

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// diff collects field mismatches of one record.
type diff []string

func (d *diff) eq(name string, got, want any) {
	if fmt.Sprint(got) != fmt.Sprint(want) {
		*d = append(*d, fmt.Sprintf("%s = %v, oracle %v", name, got, want))
	}
}

func (d diff) err() error {
	if len(d) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(d, "; "))
}

// checkSQE compares a 64-byte SQE, decoded with nvme.SQE for the common
// fields and with package fabrics for SGL1 and the Fabrics fields, with
// the oracle. It returns the number of fields compared.
func checkSQE(d *diff, b []byte, o *capture.OracleSQE, keyed bool) int {
	s, err := nvme.ParseSQE(b)
	if err != nil {
		d.eq("SQE", err, nil)
		return 0
	}
	n := 0
	eq := func(name string, got, want any) { d.eq(name, got, want); n++ }
	eq("opcode", s.Opcode(), o.Opcode)
	eq("fuse", uint8(s.Fuse()), o.Fuse)
	eq("psdt", uint8(s.PSDT()), o.PSDT)
	eq("cid", s.CID(), o.CID)
	eq("nsid", s.NSID(), o.NSID)
	eq("cdw2", s.CDW2(), o.CDW2)
	eq("cdw3", s.CDW3(), o.CDW3)
	eq("mptr", s.MPTR(), o.MPTR)
	eq("cdw10", s.CDW10(), o.CDW10)
	eq("cdw11", s.CDW11(), o.CDW11)
	eq("cdw12", s.CDW12(), o.CDW12)
	eq("cdw13", s.CDW13(), o.CDW13)
	eq("cdw14", s.CDW14(), o.CDW14)
	eq("cdw15", s.CDW15(), o.CDW15)
	sgl, err := fabrics.ParseSGL(s.SGL1())
	if err != nil {
		d.eq("SGL", err, nil)
		return n
	}
	eq("sgl.addr", sgl.Address(), o.SGL.Addr)
	eq("sgl.length", sgl.Length(), o.SGL.Length)
	eq("sgl.type", uint8(sgl.Type()), o.SGL.Type)
	eq("sgl.subtype", sgl.Subtype(), o.SGL.Subtype)
	eq("sgl.raw_hex", hex.EncodeToString(sgl), o.SGL.RawHex)
	if o.SGL.Key != nil || sgl.Type() == fabrics.SGLTypeKeyedDataBlock {
		if o.SGL.Key == nil {
			d.eq("sgl.key", sgl.Key(), "absent")
		} else {
			eq("sgl.key", sgl.Key(), *o.SGL.Key)
		}
	}
	// SGL1 must pass the target's validation for the transport it came on.
	lim := fabrics.TCPSGLLimits(16384, 1<<20)
	if keyed {
		lim = fabrics.RDMASGLLimits(4096, 1<<20)
	}
	dir := fabrics.DataDirection(s.Opcode() & 3)
	if s.Opcode() == fabrics.OpcodeFabrics && o.FCType != nil {
		dir = fabrics.FCType(*o.FCType).Direction()
	}
	if err := sgl.Validate(lim, dir); err != nil {
		d.eq("SGL1 validation", err, nil)
	}
	n++

	if s.Opcode() != fabrics.OpcodeFabrics {
		if o.FCType != nil {
			d.eq("fctype", "absent", *o.FCType)
		}
		return n
	}
	c, err := fabrics.ParseCommand(b)
	if err != nil || o.FCType == nil {
		d.eq("Fabrics command", err, o.FCType)
		return n
	}
	eq("fctype", uint8(c.FCType()), *o.FCType)
	eq("fabrics cid", c.CID(), o.CID)
	opt := func(name string, got any, want any, present bool) {
		if !present {
			d.eq(name, got, "absent")
			return
		}
		eq(name, got, want)
	}
	switch c.FCType() {
	case fabrics.FCTypeConnect:
		cc := c.Connect()
		opt("recfmt", cc.RecFmt(), deref(o.RecFmt), o.RecFmt != nil)
		opt("qid", cc.QID(), deref(o.QID), o.QID != nil)
		opt("sqsize", cc.SQSize(), deref(o.SQSize), o.SQSize != nil)
		opt("cattr", cc.CAttr(), deref(o.CAttr), o.CAttr != nil)
		opt("kato", cc.KATO(), deref(o.KATO), o.KATO != nil)
	case fabrics.FCTypePropertySet:
		ps := c.PropertySet()
		opt("attrib", ps.Attrib(), deref(o.Attrib), o.Attrib != nil)
		opt("offset", ps.Offset(), deref(o.Offset), o.Offset != nil)
		opt("value", ps.Value(), deref(o.Value), o.Value != nil)
		if sz, err := fabrics.PropertySize(ps.Offset()); err != nil || sz != ps.Size() {
			d.eq("Property Set size", fmt.Sprint(sz, err), ps.Size())
		}
	case fabrics.FCTypePropertyGet:
		pg := c.PropertyGet()
		opt("attrib", pg.Attrib(), deref(o.Attrib), o.Attrib != nil)
		opt("offset", pg.Offset(), deref(o.Offset), o.Offset != nil)
		if sz, err := fabrics.PropertySize(pg.Offset()); err != nil || sz != pg.Size() {
			d.eq("Property Get size", fmt.Sprint(sz, err), pg.Size())
		}
	case fabrics.FCTypeAuthSend, fabrics.FCTypeAuthReceive:
		a := c.Auth()
		opt("spsp0", a.SPSP0(), deref(o.SPSP0), o.SPSP0 != nil)
		opt("spsp1", a.SPSP1(), deref(o.SPSP1), o.SPSP1 != nil)
		opt("secp", a.SECP(), deref(o.SECP), o.SECP != nil)
		if c.FCType() == fabrics.FCTypeAuthSend {
			opt("tl", a.TL(), deref(o.TL), o.TL != nil)
		} else {
			opt("al", a.AL(), deref(o.AL), o.AL != nil)
		}
	case fabrics.FCTypeDisconnect:
		opt("recfmt", c.Disconnect().RecFmt(), deref(o.RecFmt), o.RecFmt != nil)
	}
	return n
}

func deref[T any](p *T) T {
	var z T
	if p == nil {
		return z
	}
	return *p
}

// checkConnectData decodes Connect data and compares it with the oracle,
// and validates both NQNs.
func checkConnectData(d *diff, b []byte, o *capture.OracleConnectData) int {
	cd, err := fabrics.ParseConnectData(b)
	if err != nil {
		d.eq("connect data", err, nil)
		return 0
	}
	id := cd.HostID()
	d.eq("hostid", hex.EncodeToString(id[:]), o.HostID)
	d.eq("cntlid", cd.CntlID(), o.CntlID)
	d.eq("subnqn", cd.SubNQN(), o.SubNQN)
	d.eq("hostnqn", cd.HostNQN(), o.HostNQN)
	for _, nqn := range []string{cd.SubNQN(), cd.HostNQN()} {
		if err := fabrics.ValidateNQN(nqn); err != nil {
			d.eq("ValidateNQN", err, nil)
		}
	}
	// Linux derives the host NQN from the host ID.
	if u, ok := fabrics.UUIDFromNQN(cd.HostNQN()); ok && u != id {
		d.eq("host NQN UUID", hex.EncodeToString(u[:]), o.HostID)
	}
	return 4
}

// checkCQE compares a 16-byte CQE, decoded with nvme.CQE, with the oracle.
func checkCQE(d *diff, b []byte, o *capture.OracleCQE) int {
	c, err := nvme.ParseCQE(b)
	if err != nil {
		d.eq("CQE", err, nil)
		return 0
	}
	d.eq("dw0", c.DW0(), o.DW0)
	d.eq("dw1", c.DW1(), o.DW1)
	d.eq("sqhd", c.SQHD(), o.SQHD)
	d.eq("sqid", c.SQID(), o.SQID)
	d.eq("cid", c.CID(), o.CID)
	d.eq("phase", b2u(c.Phase()), o.Phase)
	d.eq("status_raw", c.StatusRaw(), o.StatusRaw)
	d.eq("sct", uint8(c.SCT()), o.SCT)
	d.eq("sc", c.SC(), o.SC)
	d.eq("crd", c.CRD(), o.CRD)
	d.eq("more", b2u(c.More()), o.More)
	d.eq("dnr", b2u(c.DNR()), o.DNR)
	return 12
}

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// commandName names a command the way the capture README's tables count
// them: "Fabrics Connect", "admin Identify", "I/O Read".
func commandName(sqe []byte, qid uint16) string {
	op := sqe[0]
	if op == fabrics.OpcodeFabrics {
		return "Fabrics " + fabrics.FCType(sqe[4]).String()
	}
	if qid == 0 {
		return "admin " + nvme.AdminOpcode(op).String()
	}
	return "I/O " + nvme.IOOpcode(op).String()
}
