package reconcile

import (
	"fmt"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/nvme/auth"
	"github.com/nvmeof/nvmeof/target"
)

// applyHostAuth installs the DH-HMAC-CHAP settings of a validated tree's
// hosts, replacing the previous ones (target.ReplaceHostAuth). A setting
// that does not parse (validation rules that out) is logged, without the
// secret, and the host left without a key: its controllers then refuse
// authentication rather than skip it.
func (rc *Reconciler) applyHostAuth(tree *configfs.Tree) {
	hosts := map[string]target.HostAuth{}
	for _, h := range tree.Hosts {
		if !h.HasDHCHAP() {
			continue
		}
		a, err := hostAuthConfig(h)
		if err != nil {
			rc.log.Error("host DH-HMAC-CHAP settings not applied", "host", h.NQN, "err", err)
			a = target.HostAuth{}
		}
		hosts[h.NQN] = a
	}
	rc.t.ReplaceHostAuth(hosts)
}

// hostAuthConfig maps a configfs host onto a target.HostAuth.
func hostAuthConfig(h *configfs.Host) (target.HostAuth, error) {
	var a target.HostAuth
	var err error
	if a.Key, err = auth.ParseKey(string(h.DHCHAPKey)); err != nil {
		return a, fmt.Errorf("dhchap_key: %w", err)
	}
	if h.DHCHAPCtrlKey != "" {
		if a.CtrlKey, err = auth.ParseKey(string(h.DHCHAPCtrlKey)); err != nil {
			return a, fmt.Errorf("dhchap_ctrl_key: %w", err)
		}
	}
	if a.Hash, err = auth.ParseHash(h.EffectiveDHCHAPHash()); err != nil {
		return a, err
	}
	if a.DHGroup, err = auth.ParseDHGroup(h.EffectiveDHCHAPDHGroup()); err != nil {
		return a, err
	}
	return a, nil
}

// Applied returns a copy of the configuration tree Apply last applied
// (what failed to apply left out), or an empty tree before the first.
func (rc *Reconciler) Applied() *configfs.Tree {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.applied == nil {
		return &configfs.Tree{}
	}
	return rc.applied.Clone()
}
