package hostcli

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/initiator/blockdev"
	"github.com/nvmeof/nvmeof/rdma/provider"
)

// Transports the CLI knows.
const (
	transportRDMA = "rdma"
	transportTCP  = fabrics.TransportTCP
	transportLoop = "loop"
)

// Defaults of the fabrics flags, as nvme-cli's.
const (
	defaultCtrlLossTmo = 600 // NVMF_DEF_CTRL_LOSS_TMO
	defaultTimeout     = 20 * time.Second
)

// fabricsFlags are nvme-cli's NVMF_OPTS for discover, connect and
// connect-all (names and short flags as nvme-cli's fabrics.c).
func fabricsFlags(connect bool) []cli.Flag {
	nqnUsage := "subsystem `NQN` (default: the discovery subsystem, " + fabrics.DiscoveryNQN + ")"
	if connect {
		nqnUsage = "subsystem `NQN` to connect to (required)"
	}
	return append([]cli.Flag{
		&cli.StringFlag{Name: "transport", Aliases: []string{"t"}, Value: transportRDMA,
			Usage: "transport `TYPE`: rdma (RoCEv2 through the RDMA provider of --provider), tcp (NVMe/TCP over the kernel's TCP, nothing else needed) or loop (a target run inside this process from --target-config; for tests)"},
		&cli.StringFlag{Name: "traddr", Aliases: []string{"a"}, Usage: "target `ADDRESS` (the IP address of the target's RDMA or TCP port)"},
		&cli.StringFlag{Name: "trsvcid", Aliases: []string{"s"}, Value: strconv.Itoa(fabrics.DefaultServiceID),
			Usage: "target service `PORT` (RDMA CM or TCP port)"},
		&cli.StringFlag{Name: "host-traddr", Aliases: []string{"w"},
			DefaultText: "rdma: 127.0.0.2 for a 127.x target, else the source address the kernel routes to the target; tcp: the kernel's choice",
			Usage:       "local `ADDRESS` of the host's RDMA device (soft: one device per address), or the source address of the TCP connections"},
		&cli.BoolFlag{Name: "hdr-digest", Aliases: []string{"g"},
			Usage: "tcp: CRC-32C header digests on every PDU (the connection fails if the target refuses them)"},
		&cli.BoolFlag{Name: "data-digest", Aliases: []string{"G"},
			Usage: "tcp: CRC-32C data digests on every PDU with data (the connection fails if the target refuses them)"},
		providerFlag(),
		deviceFlag(),
		&cli.StringFlag{Name: "nqn", Aliases: []string{"n"}, Usage: nqnUsage},
		&cli.StringFlag{Name: "hostnqn", Aliases: []string{"q"},
			DefaultText: initiator.HostNQNFile + ", else one derived from the DMI product UUID or machine-id",
			Usage:       "host `NQN`"},
		&cli.StringFlag{Name: "hostid", Aliases: []string{"I"}, DefaultText: initiator.HostIDFile + ", else the UUID of the host NQN",
			Usage: "host `UUID`"},
		&cli.IntFlag{Name: "nr-io-queues", Aliases: []string{"i"}, DefaultText: "the number of CPUs, also the maximum",
			Usage: "number of I/O queues `N`"},
		&cli.IntFlag{Name: "queue-size", Aliases: []string{"Q"}, DefaultText: "128",
			Usage: "I/O queue size in `ENTRIES`, 16 to 1024, capped by the controller"},
		&cli.IntFlag{Name: "keep-alive-tmo", Aliases: []string{"k"}, DefaultText: "5, none for discovery",
			Usage: "keep-alive timeout in `SECONDS`"},
		&cli.IntFlag{Name: "reconnect-delay", Aliases: []string{"c"}, DefaultText: "10",
			Usage: "`SECONDS` between reconnect attempts after a connection loss"},
		&cli.IntFlag{Name: "ctrl-loss-tmo", Aliases: []string{"l"}, Value: defaultCtrlLossTmo,
			Usage: "`SECONDS` to keep reconnecting before giving up on the controller: -1 forever, 0 give up at the first failed attempt"},
		&cli.DurationFlag{Name: "timeout", Value: defaultTimeout,
			Usage: "give up connecting after `DURATION` (covers the RDMA CM retries to an unreachable address)"},
		&cli.StringFlag{Name: "target-config", Usage: "with -t loop: run the target of this nvmetd configuration `FILE` in-process"},
	}, append(dhchapFlags(), connectExtraFlags()...)...)
}

// connectArgs are the parsed fabrics flags; a connecting daemon gets them
// as JSON.
type connectArgs struct {
	Transport      string        `json:"transport"`
	Traddr         string        `json:"traddr"`
	Trsvcid        string        `json:"trsvcid"`
	HostTraddr     string        `json:"host_traddr,omitempty"`
	NQN            string        `json:"nqn"`
	HostNQN        string        `json:"hostnqn,omitempty"`
	HostID         string        `json:"hostid,omitempty"`
	NrIOQueues     int           `json:"nr_io_queues,omitempty"`
	QueueSize      int           `json:"queue_size,omitempty"`
	KeepAliveTmo   int           `json:"keep_alive_tmo,omitempty"`
	ReconnectDelay int           `json:"reconnect_delay,omitempty"`
	CtrlLossTmo    int           `json:"ctrl_loss_tmo"`
	Timeout        time.Duration `json:"timeout"`
	TargetConfig   string        `json:"target_config,omitempty"`
	Provider       string        `json:"provider,omitempty"`
	Device         string        `json:"device,omitempty"`
	Map            string        `json:"map,omitempty"`
	LogLevel       string        `json:"log_level,omitempty"`
	// FastIOFailTmo is --fast_io_fail_tmo in seconds (-1: off) and TOS
	// --tos (-1: the provider's default); Duplicate is -D (the connect
	// command's own business).
	FastIOFailTmo int `json:"fast_io_fail_tmo"`
	TOS           int `json:"tos"`
	// Congestion is --congestion (configfs.ParseCongestionSpec: "" off).
	Congestion string `json:"congestion,omitempty"`
	// IOPolicy is --iopolicy (empty: numa, or keep the subsystem's).
	IOPolicy  string `json:"iopolicy,omitempty"`
	Duplicate bool   `json:"-"`
	// HdrDigest and DataDigest are --hdr-digest and --data-digest (tcp).
	HdrDigest  bool `json:"hdr_digest,omitempty"`
	DataDigest bool `json:"data_digest,omitempty"`
	// DHChap says that the daemon gets DH-HMAC-CHAP secrets on its
	// descriptor secretsFD; the secrets themselves never go into the
	// JSON (the daemon's command line).
	DHChap           bool   `json:"dhchap,omitempty"`
	DHChapSecret     string `json:"-"`
	DHChapCtrlSecret string `json:"-"`
}

// parseFabricsArgs reads the fabrics flags of a command.
func parseFabricsArgs(c *cli.Context) connectArgs {
	return connectArgs{
		Transport:      c.String("transport"),
		Traddr:         c.String("traddr"),
		Trsvcid:        c.String("trsvcid"),
		HostTraddr:     c.String("host-traddr"),
		NQN:            c.String("nqn"),
		HostNQN:        c.String("hostnqn"),
		HostID:         c.String("hostid"),
		NrIOQueues:     c.Int("nr-io-queues"),
		QueueSize:      c.Int("queue-size"),
		KeepAliveTmo:   c.Int("keep-alive-tmo"),
		ReconnectDelay: c.Int("reconnect-delay"),
		CtrlLossTmo:    c.Int("ctrl-loss-tmo"),
		Timeout:        c.Duration("timeout"),
		TargetConfig:   c.String("target-config"),
		Provider:       c.String("provider"),
		Device:         c.String("device"),
		Map:            c.String("map"),
		FastIOFailTmo:  c.Int("fast_io_fail_tmo"),
		TOS:            c.Int("tos"),
		Congestion:     c.String("congestion"),
		IOPolicy:       c.String("iopolicy"),
		Duplicate:      c.Bool("duplicate-connect"),
		HdrDigest:      c.Bool("hdr-digest"),
		DataDigest:     c.Bool("data-digest"),

		DHChapSecret:     c.String("dhchap-secret"),
		DHChapCtrlSecret: c.String("dhchap-ctrl-secret"),
	}
}

// providerFlag is --provider of the commands that open an RDMA device.
func providerFlag() cli.Flag {
	return &cli.StringFlag{Name: "provider", Value: provider.Auto,
		Usage: "RDMA `PROVIDER`: soft (built-in pure-Go RoCEv2 over UDP, any interface, no RDMA NIC), ibverbs " +
			"(an RDMA NIC or rxe through rdma-core; needs a binary built with -tags ibverbs) or auto (ibverbs when an " +
			"RDMA device holds the host address, else soft); built in: " + strings.Join(provider.Built(), ", ")}
}

// deviceFlag is --device of the commands that open an RDMA device.
func deviceFlag() cli.Flag {
	return &cli.StringFlag{Name: "device", DefaultText: "the device holding the host address",
		Usage: "RDMA `DEVICE` to use, as rdma-core names it (mlx5_0, rxe0; see `rdma link`); ibverbs only, and it makes auto mean ibverbs"}
}

// checkProvider checks --provider and --device.
func (a connectArgs) checkProvider() error {
	if err := provider.Check(a.Provider, a.Device); err != nil {
		switch {
		case errors.Is(err, provider.ErrDeviceWithSoft):
			return fmt.Errorf("--device %s: a device needs --provider ibverbs or auto, not soft (the soft provider has no devices)", a.Device)
		case a.Provider == provider.IBVerbs || a.Provider == provider.Soft || errors.Is(err, provider.ErrUnknown):
			return fmt.Errorf("--provider %s: %w", a.Provider, err)
		}
		return fmt.Errorf("--device %s: %w", a.Device, err)
	}
	return nil
}

// address checks the transport, address and service flags.
func (a connectArgs) address() (fabrics.Address, error) {
	var addr fabrics.Address
	switch a.Transport {
	case transportRDMA, transportLoop, transportTCP:
		addr.Transport = a.Transport
	case "":
		return addr, errors.New("required argument --transport (-t) not specified")
	case "fc":
		return addr, fmt.Errorf("transport %s is not supported (rdma, tcp or loop)", a.Transport)
	default:
		return addr, fmt.Errorf("unknown transport %q (rdma, tcp or loop)", a.Transport)
	}
	if a.Traddr == "" {
		return addr, fmt.Errorf("required argument --traddr (-a) not specified for transport %s", a.Transport)
	}
	ip, err := netip.ParseAddr(a.Traddr)
	if err != nil {
		return addr, fmt.Errorf("traddr %q is not an IP address", a.Traddr)
	}
	if ip.Zone() != "" {
		return addr, fmt.Errorf("traddr %s: zones are not allowed (the address must be global)", a.Traddr)
	}
	addr.Addr = ip.Unmap()
	svc := a.Trsvcid
	if svc == "" {
		svc = strconv.Itoa(fabrics.DefaultServiceID)
	}
	n, err := strconv.ParseUint(svc, 10, 16)
	if err != nil || n == 0 {
		return addr, fmt.Errorf("trsvcid %q is not a port number from 1 to 65535", a.Trsvcid)
	}
	addr.ServiceID = uint16(n)
	if a.Transport == transportLoop && a.TargetConfig == "" {
		return addr, errors.New("transport loop needs --target-config FILE (a target run inside this process)")
	}
	if a.Transport == transportRDMA {
		if err := a.checkProvider(); err != nil {
			return addr, err
		}
	}
	if (a.HdrDigest || a.DataDigest) && a.Transport != transportTCP {
		return addr, fmt.Errorf("--hdr-digest and --data-digest are for transport tcp, not %s", a.Transport)
	}
	return addr, nil
}

// seconds converts a flag in seconds: 0 keeps the default (nvme-cli passes
// 0 as "not given"), negative values are refused.
func seconds(name string, v int) (time.Duration, error) {
	if v < 0 {
		return 0, fmt.Errorf("%s %d: must not be negative", name, v)
	}
	return time.Duration(v) * time.Second, nil
}

// options maps the flags onto initiator.Options as nvme-cli and the Linux
// host (nvmf_parse_options) read them.
func (a connectArgs) options() (initiator.Options, error) {
	var o initiator.Options
	o.SubsystemNQN = a.NQN
	// Names are checked as nvme-cli and the Linux host check them: any
	// safe name goes (targets, Linux nvmet included, accept nvmetcli's
	// "testnqn"), only unsafe ones are refused (fabrics.CheckNQN).
	if o.SubsystemNQN != "" {
		if _, err := fabrics.CheckNQN(o.SubsystemNQN); err != nil {
			return o, fmt.Errorf("nqn %q: %w", a.NQN, err)
		}
	}
	o.HostNQN = a.HostNQN
	if o.HostNQN != "" {
		if _, err := fabrics.CheckNQN(o.HostNQN); err != nil {
			return o, fmt.Errorf("hostnqn %q: %w", a.HostNQN, err)
		}
	}
	if a.HostID != "" {
		id, err := fabrics.ParseUUID(a.HostID)
		if err != nil {
			return o, fmt.Errorf("hostid %q is not a UUID", a.HostID)
		}
		o.HostID = id
	}
	if a.NrIOQueues < 0 {
		return o, fmt.Errorf("nr-io-queues %d: must not be negative", a.NrIOQueues)
	}
	o.NrIOQueues = a.NrIOQueues
	if a.QueueSize != 0 && (a.QueueSize < initiator.MinQueueSize || a.QueueSize > initiator.MaxQueueSize) {
		return o, fmt.Errorf("queue-size %d out of range %d..%d", a.QueueSize, initiator.MinQueueSize, initiator.MaxQueueSize)
	}
	o.QueueSize = a.QueueSize
	var err error
	if o.HostKey, o.CtrlKey, err = a.parseSecrets(); err != nil {
		return o, err
	}
	if o.KeepAliveTimeout, err = seconds("keep-alive-tmo", a.KeepAliveTmo); err != nil {
		return o, err
	}
	if o.ReconnectDelay, err = seconds("reconnect-delay", a.ReconnectDelay); err != nil {
		return o, err
	}
	switch {
	case a.CtrlLossTmo < 0: // -1: reconnect forever
		o.CtrlLossTimeout = -1
	case a.CtrlLossTmo == 0: // no reconnect: give up at the first failed attempt
		o.CtrlLossTimeout = time.Nanosecond
	default:
		o.CtrlLossTimeout = time.Duration(a.CtrlLossTmo) * time.Second
	}
	if o.FastIOFailTimeout, err = a.fastIOFail(); err != nil {
		return o, err
	}
	if _, _, err := a.tos(); err != nil {
		return o, err
	}
	if _, err := a.congestion(); err != nil {
		return o, err
	}
	return o, nil
}

// mapMethod parses --map.
func (a connectArgs) mapMethod() (m blockdev.Method, none bool, err error) {
	switch a.Map {
	case "", "auto":
		return blockdev.MethodAuto, false, nil
	case "fuse", "fuse+loop":
		return blockdev.MethodFUSELoop, false, nil
	case "nbd":
		return blockdev.MethodNBD, false, nil
	case "ublk":
		return blockdev.MethodUblk, false, nil
	case "none":
		return blockdev.MethodAuto, true, nil
	}
	return 0, false, fmt.Errorf("--map %q: want auto, ublk, nbd, fuse or none", a.Map)
}

// validateConnect checks everything connect needs before a daemon starts.
func (a connectArgs) validateConnect() error {
	if a.NQN == "" {
		return errors.New("required argument --nqn (-n) not specified")
	}
	if _, err := a.address(); err != nil {
		return err
	}
	if _, err := a.options(); err != nil {
		return err
	}
	if _, _, err := a.mapMethod(); err != nil {
		return err
	}
	if a.HostTraddr != "" {
		if ip, err := netip.ParseAddr(a.HostTraddr); err != nil || ip.Zone() != "" {
			return fmt.Errorf("host-traddr %q is not an IP address", a.HostTraddr)
		}
	}
	if a.Timeout <= 0 {
		return fmt.Errorf("--timeout %v: must be positive", a.Timeout)
	}
	if _, err := a.ioPolicy(); err != nil {
		return err
	}
	return nil
}

// ioPolicy parses --iopolicy (numa when not given).
func (a connectArgs) ioPolicy() (initiator.IOPolicy, error) {
	if a.IOPolicy == "" {
		return initiator.IOPolicyNUMA, nil
	}
	p, err := initiator.ParseIOPolicy(a.IOPolicy)
	if err != nil {
		return 0, fmt.Errorf("--iopolicy %q: want numa, round-robin or queue-depth", a.IOPolicy)
	}
	return p, nil
}

// Files the default host NQN is derived from (variables for tests).
var (
	dmiUUIDFile   = "/sys/class/dmi/id/product_uuid"
	machineIDFile = "/etc/machine-id"
)

// defaultHostNQN returns the host NQN to use when -q is not given, as
// nvme-cli: the contents of /etc/nvme/hostnqn, else an NQN of the UUID
// form made from the DMI product UUID (nvmf_hostnqn_generate), else from
// /etc/machine-id, so that it is stable across commands. "" lets the
// initiator generate one.
func defaultHostNQN() string {
	if b, err := os.ReadFile(initiator.HostNQNFile); err == nil {
		s := strings.TrimSpace(string(b))
		if _, err := fabrics.CheckNQN(s); err == nil {
			return s
		}
	}
	if b, err := os.ReadFile(dmiUUIDFile); err == nil {
		if u, err := fabrics.ParseUUID(strings.TrimSpace(string(b))); err == nil && u != ([16]byte{}) && u != [16]byte{0: 0xff, 1: 0xff, 2: 0xff, 3: 0xff, 4: 0xff, 5: 0xff, 6: 0xff, 7: 0xff, 8: 0xff, 9: 0xff, 10: 0xff, 11: 0xff, 12: 0xff, 13: 0xff, 14: 0xff, 15: 0xff} {
			return fabrics.HostNQNFromUUID(u)
		}
	}
	if b, err := os.ReadFile(machineIDFile); err == nil {
		s := strings.TrimSpace(string(b))
		if len(s) == 32 {
			var u [16]byte
			ok := true
			for i := range 16 {
				v, err := strconv.ParseUint(s[2*i:2*i+2], 16, 8)
				if err != nil {
					ok = false
					break
				}
				u[i] = byte(v)
			}
			if ok {
				u[6] = u[6]&0x0f | 0x40 // a version 4 UUID, as systemd's id128 formats it
				u[8] = u[8]&0x3f | 0x80
				return fabrics.HostNQNFromUUID(u)
			}
		}
	}
	return ""
}

// Host addresses tried on loopback when the first is taken by another
// soft device (one device per address).
const loopbackHostCandidates = 16

// hostAddrs returns the local addresses to open the host's RDMA device
// on, in order of preference: the -w address; for a 127.x target
// 127.0.0.2 (the target's device usually holds 127.0.0.1) and the next
// ones; else the source address the kernel routes to the target (a
// connected UDP socket's local address: nothing is sent).
func hostAddrs(target netip.Addr, explicit string) ([]netip.Addr, error) {
	if explicit != "" {
		ip, err := netip.ParseAddr(explicit)
		if err != nil || ip.Zone() != "" {
			return nil, fmt.Errorf("host-traddr %q is not an IP address", explicit)
		}
		return []netip.Addr{ip.Unmap()}, nil
	}
	if target.Is4() && target.IsLoopback() {
		var out []netip.Addr
		for i := 2; len(out) < loopbackHostCandidates && i < 255; i++ {
			a := netip.AddrFrom4([4]byte{127, 0, 0, byte(i)})
			if a != target {
				out = append(out, a)
			}
		}
		return out, nil
	}
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(target, 4791)))
	if err != nil {
		return nil, fmt.Errorf("no route to %s: %w", target, err)
	}
	defer c.Close()
	la, ok := c.LocalAddr().(*net.UDPAddr)
	if !ok {
		return nil, fmt.Errorf("no local address routes to %s", target)
	}
	ip, _ := netip.AddrFromSlice(la.IP)
	return []netip.Addr{ip.Unmap()}, nil
}
