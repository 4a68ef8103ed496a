package configfs

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nvmeof/nvmeof/fabrics"
)

// NQN limits and well-known names (NVMe base specification, "NVMe
// Qualified Names"), as package fabrics defines them.
const (
	// NQNMaxLen is the longest NQN in bytes (NVMF_NQN_SIZE).
	NQNMaxLen = fabrics.MaxNQNLen
	// DiscoveryNQN is the well-known NQN of discovery controllers.
	DiscoveryNQN = fabrics.DiscoveryNQN
	// UUIDNQNPrefix starts NQNs of the UUID form.
	UUIDNQNPrefix = fabrics.UUIDNQNPrefix
)

// ValidateNQN checks that nqn is a valid NQN (fabrics.ValidateNQN, the
// module's one NQN rule) that can also name a configfs directory: no '/'.
// Loaders use the laxer CheckNQN.
func ValidateNQN(nqn string) error {
	if err := configfsName(nqn); err != nil {
		return err
	}
	return nqnMessage(fabrics.ValidateNQN(nqn), "")
}

// CheckNQN is the loaders' rule for subsystem and host names. Like the
// Linux target, which takes any configfs directory name (nvmetcli examples
// use names like "testnqn"), it accepts a name that is not a conforming
// NQN but is safe to use, with a warning; see fabrics.CheckNQN for what is
// safe. Names with '/' (which cannot name a configfs directory), unsafe
// names and names that start with the UUID prefix without being valid UUID
// NQNs are errors.
func CheckNQN(nqn string) (warning, err error) {
	if err := configfsName(nqn); err != nil {
		return nil, err
	}
	warning, err = fabrics.CheckNQN(nqn)
	if err != nil {
		return nil, nqnMessage(err, "")
	}
	return nqnMessage(warning, "; accepted as the Linux target accepts it, but hosts that check NQNs may refuse it"), nil
}

// configfsName refuses names that cannot be a configfs directory.
func configfsName(nqn string) error {
	if strings.ContainsRune(nqn, '/') {
		return fmt.Errorf("NQN %q: character '/' not allowed (it cannot appear in a configfs name)", nqn)
	}
	return nil
}

// nqnMessage rewords a fabrics NQN error for configuration messages as
// `NQN "name": reason` and the suffix; the result still wraps err (and so
// fabrics.ErrInvalidNQN).
func nqnMessage(err error, suffix string) error {
	var ne *fabrics.NQNError
	if !errors.As(err, &ne) {
		return err
	}
	return &wrapped{msg: fmt.Sprintf("NQN %q: %s%s", ne.NQN, ne.Reason, suffix), err: err}
}

// wrapped is an error with its own message that wraps another.
type wrapped struct {
	msg string
	err error
}

func (e *wrapped) Error() string { return e.msg }
func (e *wrapped) Unwrap() error { return e.err }
