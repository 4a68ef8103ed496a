package target

import (
	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// Admission of a new controller beyond the allowed-host check (issue 22):
// a Host ID belongs to one host NQN in a subsystem, and the controllers of
// one host and of the subsystem are bounded.

// maxControllersLocked is the subsystem's bound on controllers (t.mu
// held).
func (s *Subsystem) maxControllersLocked() int {
	if s.cfg.MaxControllers > 0 {
		return s.cfg.MaxControllers
	}
	return DefaultMaxControllers
}

// maxControllersPerHostLocked is the bound on one host NQN's controllers
// (t.mu held).
func (s *Subsystem) maxControllersPerHostLocked() int {
	if s.cfg.MaxControllersPerHost > 0 {
		return s.cfg.MaxControllersPerHost
	}
	return DefaultMaxControllersPerHost
}

// hostIDOwnerLocked returns the host NQN a Host ID is bound to in the
// subsystem, other than hostNQN: the NQN of a controller that has it, or
// of a registrant of one of the subsystem's namespaces (a registration
// outlives the host's controllers, and a reservation is held by a
// registrant). The all-zero Host ID is bound to nobody: it names no host
// (hosts that send it share nothing through it). t.mu is held.
func (s *Subsystem) hostIDOwnerLocked(hostID [16]byte, hostNQN string) (string, bool) {
	if s.disc || hostID == ([16]byte{}) {
		return "", false
	}
	for _, c := range s.ctrls {
		if c.hostID == hostID && c.hostNQN != hostNQN {
			return c.hostNQN, true
		}
	}
	for _, ns := range s.table().byID {
		if ns.pr == nil {
			continue
		}
		if owner, ok := ns.pr.ownerOf(hostID, hostNQN); ok {
			return owner, true
		}
	}
	return "", false
}

// admitLocked decides whether hostNQN with hostID may create another
// controller in s, and returns the Connect status and DW0 when not, with
// the reason to log and its key/value pairs (t.mu held).
func (s *Subsystem) admitLocked(hostNQN string, hostID [16]byte) (nvme.Error, uint32, string, []any) {
	if owner, ok := s.hostIDOwnerLocked(hostID, hostNQN); ok {
		// Linux nvmet does not check this; a Host ID is what reservations
		// fence on, and a Reservation Report shows every registrant's.
		dw0 := fabrics.InvalidParam{InData: true, Offset: fabrics.ConnectDataOffHostID}.DW0()
		return dnr(fabrics.StatusConnectInvalidHost), dw0,
			"Connect refused: the Host ID belongs to another host NQN in this subsystem",
			[]any{"hostid", fabrics.FormatUUID(hostID), "owner", owner}
	}
	if lim := s.maxControllersLocked(); len(s.ctrls) >= lim {
		// Linux's answer to a full controller ID range (nvmet_alloc_ctrl).
		return dnr(fabrics.StatusConnectControllerBusy), 0,
			"Connect refused: the subsystem has its most controllers", []any{"max_controllers", lim}
	}
	n := 0
	for _, c := range s.ctrls {
		if c.hostNQN == hostNQN {
			n++
		}
	}
	if lim := s.maxControllersPerHostLocked(); n >= lim {
		return dnr(fabrics.StatusConnectControllerBusy), 0,
			"Connect refused: the host has its most controllers in this subsystem", []any{"max_controllers_per_host", lim}
	}
	return nvme.Error{}, 0, "", nil
}
