package initiator

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/nvme/auth"
)

// Defaults, as the Linux host (drivers/nvme/host/fabrics.h, core.c) and
// nvme-cli use them.
const (
	// DefaultQueueSize is the I/O queue size in entries (NVMF_DEF_QUEUE_SIZE).
	DefaultQueueSize = 128
	// AdminQueueSize is the admin queue size in entries (NVME_AQ_DEPTH): the
	// Connect command carries SQSIZE 31, RDMA hrqsize 32 / hsqsize 31.
	AdminQueueSize = 32
	// MinQueueSize and MaxQueueSize bound QueueSize (NVMF_MIN_QUEUE_SIZE,
	// NVMF_MAX_QUEUE_SIZE).
	MinQueueSize = 16
	MaxQueueSize = 1024
	// DefaultKeepAliveTimeout is NVME_DEFAULT_KATO (5 s).
	DefaultKeepAliveTimeout = 5 * time.Second
	// DefaultReconnectDelay is NVMF_DEF_RECONNECT_DELAY (10 s).
	DefaultReconnectDelay = 10 * time.Second
	// DefaultCtrlLossTimeout is NVMF_DEF_CTRL_LOSS_TMO (600 s).
	DefaultCtrlLossTimeout = 600 * time.Second
	// DefaultCommandTimeout is the Linux nvme_io_timeout and
	// nvme_admin_timeout (30 s).
	DefaultCommandTimeout = 30 * time.Second
	// DefaultShutdownTimeout bounds the wait for CSTS.SHST on Disconnect
	// (Linux shutdown_timeout, 5 s).
	DefaultShutdownTimeout = 5 * time.Second
	// DefaultConnectTimeout bounds the transport connect of one queue, as
	// Linux's NVME_RDMA_CONNECT_TIMEOUT_MS.
	DefaultConnectTimeout = 3 * time.Second
	// maxRetries is nvme_max_retries: how often a command that failed with
	// a status without DNR is retried.
	maxRetries = 5
)

// HostNQNFile and HostIDFile are where nvme-cli keeps the host's identity
// (SYSCONFDIR/nvme/hostnqn and hostid). Variables so tests can move them.
var (
	HostNQNFile = "/etc/nvme/hostnqn"
	HostIDFile  = "/etc/nvme/hostid"
)

// Options configures Connect and Discover. The zero value selects the
// defaults of the Linux host and nvme-cli; Go's zero value meaning
// "default" is why a negative duration, not 0, turns a timer off.
type Options struct {
	// SubsystemNQN is the NQN of the subsystem to connect to (nvme-cli
	// -n). Discover uses the discovery NQN when it is empty.
	SubsystemNQN string
	// HostNQN is the host's NQN (-q). Default: the contents of
	// /etc/nvme/hostnqn, else an NQN of the UUID form generated once per
	// process.
	HostNQN string
	// HostID is the 128-bit host identifier (-I). Default: /etc/nvme/hostid,
	// else the UUID of a UUID-form HostNQN, else one generated per process.
	HostID [16]byte
	// NrIOQueues is the number of I/O queues to ask for (-i). Default and
	// maximum: the number of CPUs (as Linux nvmf_parse_options); the
	// controller may grant fewer. Ignored for discovery controllers.
	NrIOQueues int
	// QueueSize is the I/O queue size in entries (-Q), 16..1024, default
	// 128, capped by CAP.MQES and MAXCMD.
	QueueSize int
	// KeepAliveTimeout is the keep-alive timeout the host asks for (-k).
	// 0 selects the default: 5 s, or no keep-alive for a discovery
	// controller unless Persistent is set (then 30 s, as nvme-cli's
	// NVMF_DEF_DISC_TMO). A negative value disables keep-alive.
	KeepAliveTimeout time.Duration
	// Persistent keeps a discovery controller's association alive with
	// keep-alive (nvme-cli --persistent).
	Persistent bool
	// ReconnectDelay is the delay between reconnect attempts (-c),
	// default 10 s.
	ReconnectDelay time.Duration
	// CtrlLossTimeout is how long the host tries to reconnect before it
	// gives up and fails I/O (-l); default 600 s, negative: forever.
	CtrlLossTimeout time.Duration
	// FastIOFailTimeout, when positive, is how long after losing its
	// association the controller lets commands wait for the reconnection:
	// then they fail with ErrFastIOFail until it is live again (nvme-cli
	// --fast_io_fail_tmo). 0, the default, waits until CtrlLossTimeout as
	// Linux's -1.
	FastIOFailTimeout time.Duration
	// CommandTimeout is the timeout of an admin or I/O command, default 30 s.
	CommandTimeout time.Duration
	// ShutdownTimeout bounds the wait for shutdown on Disconnect, default 5 s.
	ShutdownTimeout time.Duration
	// ConnectTimeout bounds the transport connect of each queue (the RDMA
	// CM exchange), default 3 s as Linux: an unreachable target fails an
	// attempt in that time instead of after all the CM's retries.
	ConnectTimeout time.Duration
	// DHChapSecret is the host's DH-HMAC-CHAP secret in the DHHC-1
	// representation (nvme-cli --dhchap-secret, `nvmeof gen-dhchap-key`):
	// the host authenticates every queue with it when the controller
	// requires authentication. HostKey is the same as a parsed key; give
	// one or the other. Connect keeps only the parsed key; neither is ever
	// logged or put in an error.
	DHChapSecret string
	HostKey      *auth.Key
	// DHChapCtrlSecret is the controller's secret (--dhchap-ctrl-secret):
	// with it the host also asks the controller to prove its key
	// (bidirectional authentication) and refuses one that does not.
	// CtrlKey is the same as a parsed key. It needs a host secret.
	DHChapCtrlSecret string
	CtrlKey          *auth.Key
	// OnAsyncEvent, if set, is called (on the controller's event goroutine)
	// for every asynchronous event, after the host has handled it (for a
	// namespace change: after the namespaces have been re-read). It must
	// not call Disconnect or Close itself (start a goroutine for that);
	// the next Asynchronous Event Request is sent when it returns.
	OnAsyncEvent func(ev AsyncEvent)
	// MaxDiscoveryRecords bounds the records DiscoveryLog and Discover
	// read (default DefaultMaxDiscoveryRecords): a controller claiming
	// more fails the read rather than making the host allocate for it.
	MaxDiscoveryRecords int
	// Logger receives the controller's log; default: a null logger.
	Logger hclog.Logger
}

// AsyncEvent is an asynchronous event the controller reported.
type AsyncEvent struct {
	// Event is the completion's DW0 (type, information, log page).
	Event nvme.AsyncEvent
	// ChangedNSIDs lists the namespaces a Namespace Attribute Changed
	// notice concerned (from the Changed Namespace List log page), nil for
	// other events or when the controller reported more than 1024.
	ChangedNSIDs []uint32
	// Rescan marks a Namespace Attribute Changed notice the host made
	// itself: the rescan after a reset or reconnect found ChangedNSIDs
	// added, removed or resized while no association could receive the
	// controller's own notice.
	Rescan bool
}

// isDiscovery reports whether the options name the discovery subsystem.
func (o *Options) isDiscovery() bool { return o.SubsystemNQN == fabrics.DiscoveryNQN }

// withDefaults returns a copy of o with defaults filled in and values
// checked.
func (o Options) withDefaults() (Options, error) {
	if o.SubsystemNQN == "" {
		return o, fmt.Errorf("initiator: no subsystem NQN")
	}
	// As nvme-cli and the Linux host: any safe name goes (targets accept
	// names like "testnqn"); only unsafe ones are refused here.
	if _, err := fabrics.CheckNQN(o.SubsystemNQN); err != nil {
		return o, fmt.Errorf("initiator: subsystem NQN: %w", err)
	}
	if o.HostNQN == "" {
		o.HostNQN = defaultHostNQN()
	}
	if _, err := fabrics.CheckNQN(o.HostNQN); err != nil {
		return o, fmt.Errorf("initiator: host NQN: %w", err)
	}
	if o.HostID == ([16]byte{}) {
		o.HostID = defaultHostID(o.HostNQN)
	}
	if err := o.parseKeys(); err != nil {
		return o, err
	}
	if o.isDiscovery() {
		o.NrIOQueues = 0
	} else if o.NrIOQueues <= 0 {
		o.NrIOQueues = runtime.NumCPU()
	} else {
		// nvmf_parse_options: min(num_online_cpus(), nr_io_queues).
		o.NrIOQueues = min(o.NrIOQueues, runtime.NumCPU())
	}
	switch {
	case o.QueueSize == 0:
		o.QueueSize = DefaultQueueSize
	case o.QueueSize < MinQueueSize || o.QueueSize > MaxQueueSize:
		return o, fmt.Errorf("initiator: queue size %d out of range %d..%d", o.QueueSize, MinQueueSize, MaxQueueSize)
	}
	switch {
	case o.KeepAliveTimeout < 0:
		o.KeepAliveTimeout = 0
	case o.KeepAliveTimeout == 0 && o.isDiscovery():
		if o.Persistent {
			o.KeepAliveTimeout = 30 * time.Second
		}
	case o.KeepAliveTimeout == 0:
		o.KeepAliveTimeout = DefaultKeepAliveTimeout
	}
	if o.ReconnectDelay <= 0 {
		o.ReconnectDelay = DefaultReconnectDelay
	}
	if o.CtrlLossTimeout == 0 {
		o.CtrlLossTimeout = DefaultCtrlLossTimeout
	}
	if o.CommandTimeout <= 0 {
		o.CommandTimeout = DefaultCommandTimeout
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = DefaultShutdownTimeout
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	return o, nil
}

// parseKeys parses the DH-HMAC-CHAP secrets into HostKey and CtrlKey and
// forgets their text.
func (o *Options) parseKeys() error {
	parse := func(flag string, text *string, key **auth.Key) error {
		if *text == "" {
			return nil
		}
		if *key != nil {
			return fmt.Errorf("initiator: %s given both as text and as a parsed key", flag)
		}
		k, err := auth.ParseKey(*text)
		if err != nil {
			return fmt.Errorf("initiator: %s: %w", flag, err)
		}
		*key, *text = k, ""
		return nil
	}
	if err := parse("dhchap-secret", &o.DHChapSecret, &o.HostKey); err != nil {
		return err
	}
	if err := parse("dhchap-ctrl-secret", &o.DHChapCtrlSecret, &o.CtrlKey); err != nil {
		return err
	}
	if o.CtrlKey != nil && o.HostKey == nil {
		return errors.New("initiator: a controller secret (dhchap-ctrl-secret) needs the host secret (dhchap-secret) too")
	}
	return nil
}

// maxReconnects returns nvmf_parse_options' max_reconnects: -1 for
// forever, else ctrl_loss_tmo / reconnect_delay rounded up.
func (o *Options) maxReconnects() int {
	if o.CtrlLossTimeout < 0 {
		return -1
	}
	return int((o.CtrlLossTimeout + o.ReconnectDelay - 1) / o.ReconnectDelay)
}

var (
	procIdentityOnce sync.Once
	procHostUUID     [16]byte
)

// processUUID returns a random (version 4) UUID generated once per process.
func processUUID() [16]byte {
	procIdentityOnce.Do(func() {
		_, _ = rand.Read(procHostUUID[:])
		procHostUUID[6] = procHostUUID[6]&0x0f | 0x40
		procHostUUID[8] = procHostUUID[8]&0x3f | 0x80
	})
	return procHostUUID
}

// DefaultHostNQN returns the host NQN Connect uses when Options.HostNQN
// is empty: the contents of HostNQNFile, else an NQN of the UUID form
// generated once per process.
func DefaultHostNQN() string { return defaultHostNQN() }

// defaultHostNQN reads HostNQNFile, else returns the process's UUID NQN.
func defaultHostNQN() string {
	if b, err := os.ReadFile(HostNQNFile); err == nil {
		if s := strings.TrimSpace(string(b)); s != "" {
			return s
		}
	}
	return fabrics.HostNQNFromUUID(processUUID())
}

// defaultHostID reads HostIDFile, else takes the UUID of a UUID-form host
// NQN (as nvme-cli does), else the process's UUID.
func defaultHostID(hostNQN string) [16]byte {
	if b, err := os.ReadFile(HostIDFile); err == nil {
		if u, err := fabrics.ParseUUID(strings.TrimSpace(string(b))); err == nil {
			return u
		}
	}
	if u, ok := fabrics.UUIDFromNQN(hostNQN); ok {
		return u
	}
	return processUUID()
}
