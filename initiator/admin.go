package initiator

import (
	"context"
	"fmt"
	"sort"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// Namespace returns the handle of an active namespace.
func (c *Controller) Namespace(nsid uint32) (*Namespace, error) {
	c.nsMu.Lock()
	defer c.nsMu.Unlock()
	ns := c.ns[nsid]
	if ns == nil {
		return nil, fmt.Errorf("initiator: %s: namespace %d: %w", c.opts.SubsystemNQN, nsid, ErrNoNamespace)
	}
	return ns, nil
}

// Namespaces returns the active namespaces in NSID order.
func (c *Controller) Namespaces() []*Namespace {
	c.nsMu.Lock()
	out := make([]*Namespace, 0, len(c.ns))
	for _, ns := range c.ns {
		out = append(out, ns)
	}
	c.nsMu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].nsid < out[j].nsid })
	return out
}

// Rescan re-reads the active namespace list and every namespace.
func (c *Controller) Rescan(ctx context.Context) error {
	a, err := c.liveAssoc(ctx)
	if err != nil {
		return err
	}
	return c.scan(ctx, a)
}

// AdminCommand runs an admin command (a passthrough): the SQE as given
// (the transport sets CID and SGL) with data moving in direction dir. It
// returns the completion; a status other than success also comes back as
// a *CommandError.
func (c *Controller) AdminCommand(ctx context.Context, sqe [64]byte, data []byte, dir fabrics.DataDirection) ([16]byte, error) {
	a, err := c.liveAssoc(ctx)
	if err != nil {
		return [16]byte{}, err
	}
	op := nvme.AdminOpcode(sqe[0]).String()
	return c.adminExec(ctx, a, &sqe, data, dir, op, c.cmdWait())
}

// IdentifyController reads the Identify Controller data.
func (c *Controller) IdentifyController(ctx context.Context) (nvme.IdentifyController, error) {
	a, err := c.liveAssoc(ctx)
	if err != nil {
		return nil, err
	}
	id := nvme.NewIdentifyController()
	if err := c.identify(ctx, a, nvme.CNSController, 0, id); err != nil {
		return nil, err
	}
	return id, nil
}

// IdentifyNamespace reads the Identify Namespace data of nsid.
func (c *Controller) IdentifyNamespace(ctx context.Context, nsid uint32) (nvme.IdentifyNamespace, error) {
	a, err := c.liveAssoc(ctx)
	if err != nil {
		return nil, err
	}
	id := nvme.NewIdentifyNamespace()
	if err := c.identify(ctx, a, nvme.CNSNamespace, nsid, id); err != nil {
		return nil, err
	}
	return id, nil
}

// GetLogPage reads log page lid of namespace nsid (nvme.NSIDAll for the
// controller) into buf, whose length must be a multiple of 4; a page
// larger than the transfer limit is read in pieces.
func (c *Controller) GetLogPage(ctx context.Context, lid nvme.LogPageID, nsid uint32, buf []byte) error {
	a, err := c.liveAssoc(ctx)
	if err != nil {
		return err
	}
	return c.getLogPage(ctx, a, lid, nsid, 0, false, buf)
}

// SMARTLog reads the controller's SMART / Health Information log page.
func (c *Controller) SMARTLog(ctx context.Context) (nvme.SMARTLog, error) {
	buf := make([]byte, nvme.SMARTLogSize)
	if err := c.GetLogPage(ctx, nvme.LIDSMART, nvme.NSIDAll, buf); err != nil {
		return nil, err
	}
	return nvme.ParseSMARTLog(buf)
}

// GetFeature reads the current value of feature fid (Get Features, SEL
// current, CDW11 as given) and returns the completion's DW0.
func (c *Controller) GetFeature(ctx context.Context, fid nvme.FeatureID, cdw11 uint32) (uint32, error) {
	a, err := c.liveAssoc(ctx)
	if err != nil {
		return 0, err
	}
	var cdw [64]byte
	s := nvme.SQE(cdw[:])
	s.SetOpcode(uint8(nvme.AdminGetFeatures))
	nvme.FeaturesCommand{SQE: s}.SetFID(fid)
	s.SetCDW11(cdw11)
	cqe, err := c.adminExec(ctx, a, &cdw, nil, fabrics.DirNone, fmt.Sprintf("Get Features (%v)", fid), c.cmdWait())
	return nvme.CQE(cqe[:]).DW0(), err
}

// SetFeature sets feature fid to cdw11 (saved across resets if save) and
// returns the completion's DW0.
func (c *Controller) SetFeature(ctx context.Context, fid nvme.FeatureID, cdw11 uint32, save bool) (uint32, error) {
	a, err := c.liveAssoc(ctx)
	if err != nil {
		return 0, err
	}
	return c.setFeature(ctx, a, fid, 0, cdw11, save)
}

// PropertyGet reads the controller property at offset off
// (fabrics.PropCAP, PropVS, PropCC, PropCSTS).
func (c *Controller) PropertyGet(ctx context.Context, off uint32) (uint64, error) {
	a, err := c.liveAssoc(ctx)
	if err != nil {
		return 0, err
	}
	return c.propGet(ctx, a, off)
}

// PropertySet writes the controller property at offset off.
func (c *Controller) PropertySet(ctx context.Context, off uint32, v uint64) error {
	a, err := c.liveAssoc(ctx)
	if err != nil {
		return err
	}
	return c.propSet(ctx, a, off, v)
}
