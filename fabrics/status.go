package fabrics

import (
	"fmt"

	"github.com/nvmeof/nvmeof/nvme"
)

// Command-specific statuses (SCT 1) of the Fabrics commands (NVMe over
// Fabrics 1.1 figure 16, NVMe base 2.0 figure 103; Linux
// NVME_SC_CONNECT_*, NVME_SC_DISCOVERY_RESTART, NVME_SC_AUTH_REQUIRED).
// The same SCT/SC pairs mean other things for NVM command set commands, so
// nvme.Status.Name does not know these: use StatusName for the completion
// of a Fabrics command.
const (
	StatusConnectIncompatibleFormat nvme.Status = 0x180
	StatusConnectControllerBusy     nvme.Status = 0x181
	StatusConnectInvalidParameters  nvme.Status = 0x182
	StatusConnectRestartDiscovery   nvme.Status = 0x183
	StatusConnectInvalidHost        nvme.Status = 0x184
	StatusInvalidQueueType          nvme.Status = 0x185
	StatusDiscoverRestart           nvme.Status = 0x190
	StatusAuthenticationRequired    nvme.Status = 0x191
)

var statusNames = map[nvme.Status]string{
	StatusConnectIncompatibleFormat: "Connect Incompatible Format",
	StatusConnectControllerBusy:     "Connect Controller Busy",
	StatusConnectInvalidParameters:  "Connect Invalid Parameters",
	StatusConnectRestartDiscovery:   "Connect Restart Discovery",
	StatusConnectInvalidHost:        "Connect Invalid Host",
	StatusInvalidQueueType:          "Invalid Queue Type",
	StatusDiscoverRestart:           "Discover Restart",
	StatusAuthenticationRequired:    "Authentication Required",
}

// StatusName names the status of a Fabrics command's completion: the
// Fabrics meaning of a command-specific code, else nvme's name.
func StatusName(s nvme.Status) string {
	if n, ok := statusNames[s&0x7ff]; ok {
		return n
	}
	return s.Name()
}

// StatusString is StatusName with the numbers, e.g. "Connect Invalid
// Parameters (SCT 1 SC 0x82)".
func StatusString(s nvme.Status) string {
	return fmt.Sprintf("%s (SCT %d SC 0x%02x)", StatusName(s), uint8(s.SCT()), s.SC())
}

// statusErr returns an error that wraps an *nvme.Error with status s and
// DNR set, so that nvme.AsError and nvme.StatusOf find the status.
func statusErr(s nvme.Status, format string, args ...any) error {
	return fmt.Errorf("fabrics: %s: %w", fmt.Sprintf(format, args...), nvme.NewError(s, true))
}
