package runner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/bench/report"
)

// Topologies (-topology): the network path between fio and the servers.
// Each has its own nbdkit and nvmetd, and its rows in the report, whose
// ratios compare nvmeof with nbdkit over the same path.
//
//   - loopback: the host's lo (the original benchmark; the nvmeof side in
//     a network namespace of its own, see NvmeofConfig).
//   - veth4: two network namespaces the runner creates, joined by a veth
//     pair with MTU 9000; the servers in one (192.0.2.1), fio in the other
//     (192.0.2.2). The soft RoCE devices are in raw mode (IPv4 off
//     loopback: a raw socket, hence root).
//   - veth6: the same namespaces and link over IPv6, 2001:db8::1 and
//     2001:db8::2 (the soft RoCE devices in udp6 mode).
//
// The veth topologies need root (namespaces, veth, raw sockets) and the
// tools unshare, nsenter, ip and sleep; without them they are skipped, the
// reason in the report.
const (
	TopologyLoopback = report.TopologyLoopback
	TopologyVeth4    = "veth4"
	TopologyVeth6    = "veth6"
)

// AllTopologies lists every topology in run order.
var AllTopologies = []string{TopologyLoopback, TopologyVeth4, TopologyVeth6}

// DefaultTopologies returns the topologies of a run of mode: all three for
// a full run (about an hour), loopback alone for -quick and -smoke, which
// would otherwise take three times as long.
func DefaultTopologies(mode string) []string {
	if mode == ModeQuick || mode == ModeSmoke {
		return []string{TopologyLoopback}
	}
	return slices.Clone(AllTopologies)
}

// ParseTopologies parses a -topology value: topology names separated by
// commas, or "all". The result keeps the given order without repeats.
func ParseTopologies(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "":
			continue
		case f == "all":
			for _, t := range AllTopologies {
				if !slices.Contains(out, t) {
					out = append(out, t)
				}
			}
		case slices.Contains(AllTopologies, f):
			if !slices.Contains(out, f) {
				out = append(out, f)
			}
		default:
			return nil, fmt.Errorf("topology %q: want %s or all", f, strings.Join(AllTopologies, ", "))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("topology %q: no topology named", s)
	}
	return out, nil
}

// The veth link: documentation addresses (RFC 5737, RFC 3849), which
// exist only inside the runner's namespaces.
const (
	VethServer4 = "192.0.2.1"
	VethClient4 = "192.0.2.2"
	VethServer6 = "2001:db8::1"
	VethClient6 = "2001:db8::2"
	VethMTU     = 9000
	// vethNbdPort is nbdkit's port in the server namespace, where nothing
	// else listens (NBD's registered port).
	vethNbdPort = 10809
)

// vethAddrs returns the server's and the client's address on topology.
func vethAddrs(topology string) (server, client string) {
	if topology == TopologyVeth6 {
		return VethServer6, VethClient6
	}
	return VethServer4, VethClient4
}

// vethDescription describes topology's link for the report.
func vethDescription(topology string) string {
	srv, cli := vethAddrs(topology)
	mode := "raw mode"
	if topology == TopologyVeth6 {
		mode = "udp6 mode"
	}
	return fmt.Sprintf("a veth pair, MTU %d, between two network namespaces the runner created: servers on %s, fio on %s "+
		"(soft RoCE devices in %s)", VethMTU, srv, cli, mode)
}

// vethIfNames returns the names of the veth pair's ends, made unique by
// the runner's PID (at most 15 bytes, IFNAMSIZ, for any PID up to 2^22,
// the kernel's limit).
func vethIfNames(pid int) (server, client string) {
	return fmt.Sprintf("nvb%ds", pid), fmt.Sprintf("nvb%dc", pid)
}

// vethCommands returns the commands that join the network namespaces of
// processes serverPID and clientPID with a veth pair, ends serverIf and
// clientIf, each end with its IPv4 and IPv6 address (nodad: usable at
// once) and up, with each namespace's lo up. Every command runs inside a
// namespace (nsenter): the pair is created in the server's, its peer end
// straight in the client's, so nothing is ever made in the runner's.
func vethCommands(serverPID, clientPID int, serverIf, clientIf string) [][]string {
	in := func(pid int, args ...string) []string { return append(nsenterPrefix(pid), args...) }
	mtu := strconv.Itoa(VethMTU)
	return [][]string{
		in(serverPID, "ip", "link", "add", serverIf, "mtu", mtu, "type", "veth",
			"peer", "name", clientIf, "mtu", mtu, "netns", strconv.Itoa(clientPID)),
		in(serverPID, "ip", "link", "set", "lo", "up"),
		in(serverPID, "ip", "addr", "add", VethServer4+"/24", "dev", serverIf),
		in(serverPID, "ip", "addr", "add", VethServer6+"/64", "dev", serverIf, "nodad"),
		in(serverPID, "ip", "link", "set", serverIf, "up"),
		in(clientPID, "ip", "link", "set", "lo", "up"),
		in(clientPID, "ip", "addr", "add", VethClient4+"/24", "dev", clientIf),
		in(clientPID, "ip", "addr", "add", VethClient6+"/64", "dev", clientIf, "nodad"),
		in(clientPID, "ip", "link", "set", clientIf, "up"),
	}
}

// nsHolderArgv is the command a namespace holder runs: a new network
// namespace (unshare --net) holding nothing but a sleep, so that the
// namespace lasts until the runner ends that process by its PID.
var nsHolderArgv = []string{"sleep", "infinity"}

// vethLink is the veth topologies' two network namespaces, each held by a
// process the runner started, and the veth pair between them.
type vethLink struct {
	server, client     *Server
	serverIf, clientIf string
}

// vethTools returns why the veth topologies cannot run here, or "".
func vethTools() string {
	if os.Geteuid() != 0 {
		return "not root: the veth topologies create network namespaces and a veth pair, and raw sockets for IPv4; run as root"
	}
	for _, t := range []string{"unshare", "nsenter", "ip", nsHolderArgv[0]} {
		if _, err := exec.LookPath(t); err != nil {
			return t + " not found"
		}
	}
	return ""
}

// netnsOf returns the network namespace of process pid (0: the runner),
// as the device and inode of its /proc/PID/ns/net.
func netnsOf(pid int) (uint64, uint64, error) {
	p := "/proc/self/ns/net"
	if pid > 0 {
		p = filepath.Join("/proc", strconv.Itoa(pid), "ns", "net")
	}
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return 0, 0, fmt.Errorf("network namespace of %s: %w", p, err)
	}
	return st.Dev, st.Ino, nil
}

// newVethLink creates the two namespaces and the veth pair. On failure it
// removes what it made.
func (c Config) newVethLink(ctx context.Context) (l *vethLink, err error) {
	if why := vethTools(); why != "" {
		return nil, errors.New(why)
	}
	l = &vethLink{}
	l.serverIf, l.clientIf = vethIfNames(os.Getpid())
	defer func() {
		if err != nil {
			l.close(c)
			l = nil
		}
	}()
	hold := func(name string) (*Server, error) {
		// startServer returns once the process runs sleep, that is
		// after unshare made the namespace.
		s, err := startServer(name, nsHolderArgv, filepath.Join(c.WorkDir, name+".log"),
			serverWrap{Prefix: []string{"unshare", "--net", "--"}})
		if err != nil {
			return nil, fmt.Errorf("veth: %w", err)
		}
		s.Grace = 5 * time.Second
		return s, nil
	}
	if l.server, err = hold("netns-server"); err != nil {
		return l, err
	}
	if l.client, err = hold("netns-client"); err != nil {
		return l, err
	}
	// Never configure the runner's own namespace (where 192.0.2.0/24 may
	// well be a real network): check that both are new and distinct.
	var ids [3][2]uint64
	for i, pid := range []int{0, l.server.PID, l.client.PID} {
		if ids[i][0], ids[i][1], err = netnsOf(pid); err != nil {
			return l, fmt.Errorf("veth: %w", err)
		}
	}
	if ids[1] == ids[0] || ids[2] == ids[0] || ids[1] == ids[2] {
		return l, fmt.Errorf("veth: the namespace holders (pids %d, %d) are not in new network namespaces of their own", l.server.PID, l.client.PID)
	}
	c.logf("== veth: network namespaces of pids %d (servers) and %d (fio), veth %s/%s, MTU %d, %s/%s and %s/%s",
		l.server.PID, l.client.PID, l.serverIf, l.clientIf, VethMTU, VethServer4, VethClient4, VethServer6, VethClient6)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, argv := range vethCommands(l.server.PID, l.client.PID, l.serverIf, l.clientIf) {
		if out, err := exec.CommandContext(cctx, argv[0], argv[1:]...).CombinedOutput(); err != nil {
			return l, fmt.Errorf("veth: %s: %w: %s", strings.Join(argv, " "), err, cut(string(out), 200))
		}
	}
	return l, nil
}

// close removes the veth pair and ends the namespace holders by their PIDs:
// the namespaces go with them (the servers in them were stopped before).
// It runs at the end, on failure and on interrupt alike.
func (l *vethLink) close(c Config) {
	if l.server != nil && !l.server.exited() {
		// The pair would go with either namespace; delete it first anyway,
		// so that nothing of it outlives a holder that will not die.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		argv := append(nsenterPrefix(l.server.PID), "ip", "link", "del", l.serverIf)
		if out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput(); err != nil &&
			!strings.Contains(string(out), "Cannot find device") {
			c.logf("   veth: %s: %v: %s", strings.Join(argv, " "), err, cut(string(out), 200))
		}
		cancel()
	}
	for _, s := range []*Server{l.server, l.client} {
		if s != nil {
			c.stopper(s)()
		}
	}
}

// inNetns runs fn on an OS thread moved into the network namespace of
// process pid (sockets fn makes are made there, and stay there), then moves
// the thread back. The thread must survive: the servers' Pdeathsig fires
// when the thread that started them ends, and any thread may have.
func inNetns(pid int, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("own network namespace: %w", err)
			return
		}
		defer self.Close()
		target, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "ns", "net"))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("network namespace of pid %d: %w", pid, err)
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns to pid %d's network namespace: %w", pid, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			// Left locked, the thread ends with the goroutine rather
			// than run others in the wrong namespace.
			errc <- errors.Join(ferr, fmt.Errorf("setns back to the runner's network namespace: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// dialInNetns connects over TCP to addr from the network namespace of
// process pid, and closes the connection: the client's view of a server in
// another namespace.
func dialInNetns(pid int, addr string, timeout time.Duration) error {
	return inNetns(pid, func() error {
		// A literal address: one dial, on this goroutine and thread, so
		// the socket is made in the namespace.
		conn, err := net.DialTimeout("tcp", addr, timeout)
		if err != nil {
			return err
		}
		return conn.Close()
	})
}

// setupVeth starts topology's servers in the link's server namespace,
// nbdkit on the topology's server address and nvmetd with a soft RoCE port
// there, with fio in the client namespace, and prefills both sides. It
// returns the sides, a function that stops the servers, and the
// topology's description (nvmeof's skip reason in it); an error only when
// the context is done or nbdkit fails.
func (c Config) setupVeth(ctx context.Context, topology string, l *vethLink) ([]*side, func(), report.Topology, error) {
	srvAddr, cliAddr := vethAddrs(topology)
	info := report.Topology{Name: topology, Link: vethDescription(topology)}
	var stops []func()
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	inServer, inClient := nsenterPrefix(l.server.PID), nsenterPrefix(l.client.PID)
	var sides []*side
	if !c.SkipNbdkit {
		c.logf("== %s: nbdkit memory %s on %s, fio nbd engine over TCP from %s", topology, c.MemSize, srvAddr, cliAddr)
		w := serverWrap{Prefix: slices.Clone(inServer)}
		if c.countSyscalls {
			w.PerfOut = filepath.Join(c.WorkDir, "perf-nbdkit-"+topology+".csv")
			w.Prefix = append(append(w.Prefix, c.perfBin()), perfStatArgs(w.PerfOut, perfInterval)...)
		}
		// Ready once fio's namespace reaches it over the link.
		nbd, err := startNbdkitTCP(ctx, c.Nbdkit, filepath.Join(c.WorkDir, "nbdkit-"+topology+".log"), c.MemSize,
			srvAddr, vethNbdPort, w, func(addr string) error { return dialInNetns(l.client.PID, addr, time.Second) })
		if err != nil {
			return nil, stop, info, fmt.Errorf("%s: %w", topology, err)
		}
		stops = append(stops, c.stopper(nbd.Server))
		info.NbdkitTarget = fmt.Sprintf("nbdkit memory %s (pid %d), %s, in the server namespace", c.MemSize, nbd.PID, nbd.URI())
		s := &side{name: report.SideNbdkit, topology: topology, label: report.SideNbdkit, engine: nbd.Engine(),
			server: nbd.Server, wrap: inClient}
		if err := c.prefill(ctx, s); err != nil {
			return nil, stop, info, fmt.Errorf("%s: %w", topology, err)
		}
		sides = append(sides, s)
	}

	c.logf("== %s: nvmeof: nvmetd memory %s on %s %s, fio engine from %s", topology, c.MemSize, c.Nvmeof.transport(), srvAddr, cliAddr)
	n := c.Nvmeof
	n.Address, n.HostAddress, n.Fallback, n.Netns = srvAddr, cliAddr, false, false
	if n.Port == 0 {
		n.Port = pickPort()
	}
	skip := ""
	if ok, why := n.Available(); !ok {
		skip = why
	} else if n.Nvmetd == "" {
		skip = "needs an nvmetd to start in the server namespace (-nvmetd)"
	}
	if skip == "" {
		srv, err := c.startNvmetd(ctx, n, "-"+topology, inServer)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, stop, info, err
		case err != nil:
			skip = "nvmetd did not start: " + err.Error()
		default:
			stops = append(stops, c.stopper(srv))
			info.NvmeofTarget = fmt.Sprintf("nvmetd %s (pid %d), memory namespace %s, %s %s:%d, subsystem %s, host %s; nvmetd in the server namespace, fio in the client's",
				n.Nvmetd, srv.PID, c.MemSize, n.transport(), srvAddr, n.Port, n.NQN, cliAddr)
			nv := &side{name: report.SideNvmeof, topology: topology, label: report.SideNvmeof, engine: n.EngineArgs(),
				server: srv, wrap: inClient, datagrams: true, netnsPIDs: []int{l.server.PID, l.client.PID},
				udp6: topology == TopologyVeth6, dgramSrc: srcVethSNMP}
			c.logf("   engine: %s", strings.Join(nv.engine, " "))
			if err := c.prefill(ctx, nv); err != nil {
				if ctx.Err() != nil {
					return nil, stop, info, err
				}
				skip = "nvmeof: " + err.Error()
			} else {
				sides = append(sides, nv)
				info.DatagramSource = "from the Udp and Udp6 OutDatagrams counters of both namespaces (/proc/PID/net/snmp and snmp6 of " +
					"the processes holding them; only the benchmark's traffic is in them), sent by both ends"
			}
		}
	}
	if skip != "" {
		info.NvmeofSkipped = skip
		c.logf("   nvmeof skipped on %s: %s", topology, skip)
	}
	return sides, stop, info, nil
}
