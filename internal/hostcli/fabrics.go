package hostcli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/initiator/session"
	"github.com/nvmeof/nvmeof/internal/hostcli/nvmeprint"
	"github.com/nvmeof/nvmeof/nvme"
)

// Bounds of the connect work beyond --timeout: mapping the namespaces,
// and the daemon's start.
const (
	mapTimeout   = 60 * time.Second
	startSlack   = 30 * time.Second
	callTimeout  = 15 * time.Second // a control request (Identify, state)
	disconnTmo   = 45 * time.Second // a disconnect request (unmap + shutdown)
	exitWaitTime = 15 * time.Second // the daemon's exit after a disconnect
)

// readDiscovery connects to the discovery controller, reads the discovery
// log page and its generation counter, and disconnects.
func readDiscovery(ctx context.Context, tr *transport, opts initiator.Options) (uint64, []initiator.DiscoveryEntry, error) {
	if opts.SubsystemNQN == "" {
		opts.SubsystemNQN = fabrics.DiscoveryNQN
	}
	ctrl, err := initiator.Connect(ctx, tr.dialer, tr.addr, opts)
	if err != nil {
		return 0, nil, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = ctrl.Disconnect(dctx)
	}()
	entries, err := ctrl.DiscoveryLog(ctx)
	if err != nil {
		return 0, nil, err
	}
	// DiscoveryLog does not return the generation counter: read the
	// header once more for it.
	hdr := make([]byte, fabrics.DiscoveryHeaderLen)
	var genctr uint64
	if err := ctrl.GetLogPage(ctx, nvme.LIDDiscovery, 0, hdr); err == nil {
		if h, err := fabrics.ParseDiscoveryHeader(hdr); err == nil {
			genctr = h.GenCtr()
		}
	}
	return genctr, entries, nil
}

// discoverWith opens the transport of a and reads the discovery log.
func discoverWith(c *cli.Context, a connectArgs) (uint64, []initiator.DiscoveryEntry, error) {
	if a.NQN == "" {
		a.NQN = fabrics.DiscoveryNQN
	}
	if a.HostNQN == "" {
		a.HostNQN = defaultHostNQN()
	}
	opts, err := a.options()
	if err != nil {
		return 0, nil, err
	}
	log := newLogger(c, "nvmeof")
	opts.Logger = log
	tr, err := openTransport(a, log)
	if err != nil {
		return 0, nil, err
	}
	defer tr.close()
	ctx, cancel := context.WithTimeout(c.Context, a.Timeout)
	defer cancel()
	genctr, entries, err := readDiscovery(ctx, tr, opts)
	if err != nil {
		return 0, nil, errors.New(describeConnectError(err, a, tr))
	}
	return genctr, entries, nil
}

func cmdDiscover(c *cli.Context) error {
	format, err := checkFormat(c)
	if err != nil {
		return err
	}
	a := parseFabricsArgs(c)
	if _, err := a.address(); err != nil {
		return err
	}
	genctr, entries, err := discoverWith(c, a)
	if err != nil {
		return err
	}
	return nvmeprint.Discovery(c.App.Writer, format, genctr, entries)
}

// sameConnection reports whether a live daemon already holds a's
// connection (the kernel's nvmf_ctlr_matches_baseopts: transport, address,
// service, NQN, host NQN and host address).
func sameConnection(st *session.State, a connectArgs) bool {
	if st.SubsysNQN != a.NQN || !sameHost(st, a) {
		return false
	}
	if st.Transport == a.Transport && st.Traddr == a.Traddr && st.Trsvcid == a.Trsvcid {
		return true
	}
	for _, p := range st.Paths {
		if p.Transport == a.Transport && p.Traddr == a.Traddr && p.Trsvcid == a.Trsvcid {
			return true
		}
	}
	return false
}

// findConnected returns the live daemon holding a's connection, if any.
func findConnected(runDir string, a connectArgs) *session.State {
	live, _, _ := session.Scan(runDir)
	for _, e := range live {
		if e.State != nil && sameConnection(e.State, a) {
			return e.State
		}
	}
	return nil
}

// findSubsystem returns the live daemon holding a path to a's subsystem
// for the same host (the Linux host's nvme_ns_head: a second controller
// of a subsystem adds a path to its namespaces), if any.
func findSubsystem(runDir string, a connectArgs) *session.Entry {
	live, _, _ := session.Scan(runDir)
	for _, e := range live {
		if e.State != nil && e.State.SubsysNQN == a.NQN && len(e.State.Paths) > 0 &&
			(a.HostNQN == "" || e.State.HostNQN == "" || e.State.HostNQN == a.HostNQN) {
			return &e
		}
	}
	return nil
}

// addPathTimeoutSlack is the time the daemon gets beyond --timeout to
// add a path (it maps namespaces the new path brings).
const addPathTimeoutSlack = 70 * time.Second

// addPath asks daemon e to connect a's address as another path of its
// subsystem and returns its new state.
func addPath(c *cli.Context, e *session.Entry, a connectArgs) (*session.State, error) {
	if a.DHChapSecret != "" || a.DHChapCtrlSecret != "" {
		return nil, fmt.Errorf("%s is connected as %s: a path added to it authenticates with the secrets of its first connect; give none (or -D for a separate controller)", a.NQN, e.Name)
	}
	spec, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(c.Context, a.Timeout+addPathTimeoutSlack)
	defer cancel()
	resp, err := session.Call(ctx, e.SocketPath(), session.Request{Op: session.OpAddPath, Spec: spec, IOPolicy: a.IOPolicy})
	if err != nil {
		return nil, fmt.Errorf("%s: adding the path %s %s:%s: %s", e.Name, a.Transport, a.Traddr, a.Trsvcid, trimPrefixes(err.Error()))
	}
	return resp.State, nil
}

// errAlreadyConnected is wrapped when connect finds the connection made.
var errAlreadyConnected = errors.New("already connected")

// connected is what connectOne made: a daemon's state, and whether the
// connect added a path to a connected subsystem rather than a controller
// (path: its name).
type connected struct {
	args  connectArgs
	state *session.State
	added bool
	path  string
}

// addedPath names the path of st that a connected (the last that matches
// its addresses).
func addedPath(st *session.State, a connectArgs) string {
	name := ""
	for _, p := range st.Paths {
		if p.Traddr == a.Traddr && p.Trsvcid == a.Trsvcid && (a.HostTraddr == "" || p.HostTraddr == a.HostTraddr) {
			name = p.Name
		}
	}
	return name
}

// connectOne starts the daemon of one connection and waits for its
// report, or adds a path to the daemon of a's subsystem when one is
// connected (docs/multipath.md).
func connectOne(c *cli.Context, a connectArgs) (connected, error) {
	if err := a.validateConnect(); err != nil {
		return connected{}, err
	}
	if err := checkLogTarget(c); err != nil { // logtarget.go
		return connected{}, err
	}
	if a.Trsvcid == "" {
		a.Trsvcid = strconv.Itoa(fabrics.DefaultServiceID)
	}
	runDir := c.String("run-dir")
	if a.HostNQN == "" {
		a.HostNQN = defaultHostNQN()
	}
	if st := findConnected(runDir, a); st != nil && !a.Duplicate {
		return connected{}, fmt.Errorf("%s at %s %s:%s: %w as %s (-D/--duplicate-connect makes another controller)", a.NQN, a.Transport, a.Traddr, a.Trsvcid, errAlreadyConnected, st.Name)
	}
	if e := findSubsystem(runDir, a); e != nil && !a.Duplicate {
		st, err := addPath(c, e, a)
		if err != nil {
			return connected{}, err
		}
		return connected{args: a, state: st, added: true, path: addedPath(st, a)}, nil
	}
	switch lvl := hclog.LevelFromString(c.String("log-level")); lvl {
	case hclog.Trace, hclog.Debug:
		a.LogLevel = lvl.String()
	default:
		a.LogLevel = "info"
	}
	exe, err := os.Executable()
	if err != nil {
		return connected{}, fmt.Errorf("cannot find this program to start the connection daemon: %w", err)
	}
	slot, err := session.Allocate(runDir)
	if errors.Is(err, fs.ErrPermission) {
		return connected{}, fmt.Errorf("run as root (the soft RoCE device needs CAP_NET_RAW, the block devices CAP_SYS_ADMIN): %s", trimPrefixes(err.Error()))
	}
	if err != nil {
		return connected{}, trimErr(err)
	}
	var extra []*os.File
	if a.DHChapSecret != "" || a.DHChapCtrlSecret != "" {
		a.DHChap = true
		pr, err := secretsPipe(a)
		if err != nil {
			slot.Release()
			return connected{}, err
		}
		defer pr.Close()
		extra = append(extra, pr)
	}
	spec, err := json.Marshal(a)
	if err != nil {
		slot.Release()
		return connected{}, err
	}
	args := []string{"--run-dir", runDir, daemonCommand, "--name", slot.Name, "--spec", string(spec)}
	margs, err := daemonMetricsArgs(c) // metrics.go
	if err != nil {
		slot.Release()
		return connected{}, err
	}
	args = append(args, margs...)
	largs, lf := daemonLogArgs(c, secretsFD+len(extra)) // logtarget.go
	args = append(args, largs...)
	if lf != nil {
		extra = append(extra, lf)
	}
	where := logWhere(c.String("log-target"), runDir, slot.Name)
	log := newLogger(c, "nvmeof")
	log.Debug("starting the connection daemon", "name", slot.Name, "log", where, "log_level", a.LogLevel)
	st, err := session.StartDaemon(exe, args, slot, a.Timeout+mapTimeout+startSlack, extra...)
	if err != nil {
		log.Debug("the connection daemon failed; its log stays", "name", slot.Name, "log", where)
		return connected{}, fmt.Errorf("%s (log: %s)", trimPrefixes(err.Error()), where)
	}
	log.Debug("connection daemon running", "name", st.Name, "pid", st.PID, "log", st.Log)
	return connected{args: a, state: st}, nil
}

// trimErr makes an error one line without package prefixes.
func trimErr(err error) error { return errors.New(trimPrefixes(err.Error())) }

// printConnected prints what connect made: the mapped devices, one per
// line, then the controller name (JSON: nvme-cli's {"device": ...} plus
// the namespaces); and, on stderr, connectNotes.
func printConnected(c *cli.Context, format string, cn connected) error {
	for _, n := range connectNotes(cn) {
		fmt.Fprintln(c.App.ErrWriter, n)
	}
	return nvmeprint.Connected(c.App.Writer, format, cn.state)
}

// connectNotes are what a connect's output leaves implicit, one line
// each: that it added a path to a connected subsystem rather than a
// controller, and which mapping --map auto chose.
func connectNotes(cn connected) []string {
	st := cn.state
	var notes []string
	if cn.added {
		path := "a path"
		if cn.path != "" {
			path = "path " + cn.path
		}
		// The mapping was chosen by the subsystem's first connect.
		return append(notes, fmt.Sprintf("%s: added %s to %s, connected already: no new controller or device (-D makes a separate controller)", st.Name, path, st.SubsysNQN))
	}
	if cn.args.Map != "" && cn.args.Map != "auto" {
		return notes
	}
	var each, distinct []string // "nvmeof0n1 ublk" per mapped namespace; the methods
	for _, ns := range st.Namespaces {
		if ns.Method == "" {
			continue
		}
		each = append(each, ns.Generic+" "+ns.Method)
		if !slices.Contains(distinct, ns.Method) {
			distinct = append(distinct, ns.Method)
		}
	}
	chose := each
	switch len(distinct) {
	case 0:
		return notes
	case 1:
		chose = distinct
	}
	return append(notes, fmt.Sprintf("%s: --map auto chose %s", st.Name, strings.Join(chose, ", ")))
}

func cmdConnect(c *cli.Context) error {
	format, err := checkFormat(c)
	if err != nil {
		return err
	}
	a := parseFabricsArgs(c)
	cn, err := connectOne(c, a)
	if err != nil {
		return err
	}
	return printConnected(c, format, cn)
}

func cmdConnectAll(c *cli.Context) error {
	format, err := checkFormat(c)
	if err != nil {
		return err
	}
	a := parseFabricsArgs(c)
	if _, err := a.address(); err != nil {
		return err
	}
	if _, _, err := a.mapMethod(); err != nil {
		return err
	}
	// The discovery's soft device is closed before the daemons open
	// theirs on the same host address.
	_, entries, err := discoverWith(c, a)
	if err != nil {
		return err
	}
	var errs []string
	for _, e := range entries {
		if e.SubType != fabrics.SubTypeNVM {
			continue
		}
		addr, err := e.Address()
		if err != nil {
			errs = append(errs, trimPrefixes(err.Error()))
			continue
		}
		if addr.Transport != a.Transport {
			continue // nvme-cli skips entries of another transport
		}
		b := a
		b.NQN = e.SubNQN
		if addr.Addr.IsValid() {
			b.Traddr = addr.Addr.String()
		}
		b.Trsvcid = strconv.Itoa(int(addr.ServiceID))
		cn, err := connectOne(c, b)
		if errors.Is(err, errAlreadyConnected) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", e.SubNQN, err))
			continue
		}
		if err := printConnected(c, format, cn); err != nil {
			return err
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// disconnectEntry asks a daemon to disconnect and waits for it to exit.
func disconnectEntry(c *cli.Context, e session.Entry) error {
	_, err := disconnectRequest(c, e, session.Request{Op: session.OpDisconnect})
	return err
}

// disconnectRequest sends a disconnect or a path removal to a daemon and,
// when the daemon ends (a disconnect, or the removal of its last path:
// the answer has no state), waits for it to exit.
func disconnectRequest(c *cli.Context, e session.Entry, req session.Request) (*session.Response, error) {
	pid := 0
	if e.State != nil {
		pid = e.State.PID
	}
	ctx, cancel := context.WithTimeout(c.Context, disconnTmo)
	defer cancel()
	resp, err := session.Call(ctx, e.SocketPath(), req)
	if err != nil {
		if errors.Is(err, session.ErrNoDaemon) && waitGone(c.String("run-dir"), e.Name, time.Second) {
			return nil, nil // died meanwhile: cleaned up as stale
		}
		return nil, fmt.Errorf("%s: %v", e.Name, trimPrefixes(err.Error()))
	}
	if req.Op == session.OpRemovePath && resp.State != nil {
		return resp, nil // the daemon goes on with its other paths
	}
	if !waitGone(c.String("run-dir"), e.Name, exitWaitTime) || !waitExit(pid, exitWaitTime) {
		return nil, fmt.Errorf("%s: disconnected, but its daemon has not exited after %v", e.Name, exitWaitTime)
	}
	return resp, nil
}

// findPath returns the daemon holding the path named name (nvmeof0,
// nvmeof0c1, ...; see session.PathState), if any.
func findPath(c *cli.Context, runDir, name string) (session.Entry, *session.State, bool) {
	live, _, _ := session.Scan(runDir)
	return pathIn(c, live, name)
}

// pathIn is findPath among the daemons live.
func pathIn(c *cli.Context, live []session.Entry, name string) (session.Entry, *session.State, bool) {
	name = strings.TrimPrefix(name, "/dev/")
	for _, e := range live {
		st := liveState(c, e)
		if st == nil {
			continue
		}
		for _, p := range st.Paths {
			if p.Name == name {
				return e, st, true
			}
		}
	}
	return session.Entry{}, nil, false
}

// nPaths is the number of controllers (paths) a daemon holds.
func nPaths(st *session.State) int {
	if st == nil || len(st.Paths) == 0 {
		return 1
	}
	return len(st.Paths)
}

// waitExit waits until process pid has exited (or is a zombie).
func waitExit(pid int, timeout time.Duration) bool {
	if pid <= 0 {
		return true
	}
	deadline := time.Now().Add(timeout)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// processAlive reports whether pid runs. A zombie does not, once its
// other threads are gone too: a killed process's leader can be a zombie
// while threads still exit (one in a FUSE or block request), and until
// the last one has, the process's files (its session lock) stay open.
func processAlive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) S ...: the state follows the last ')'; field 20 (the
	// 18th after it) is the number of threads.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return true
	}
	if b[i+2] != 'Z' && b[i+2] != 'X' {
		return true
	}
	f := strings.Fields(string(b[i+1:]))
	return len(f) > 17 && f[17] != "1" && f[17] != "0"
}

// waitGone waits until no live daemon has name (Scan removes the state of
// dead ones).
func waitGone(runDir, name string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		live, _, _ := session.Scan(runDir)
		found := false
		for _, e := range live {
			if e.Name == name {
				found = true
			}
		}
		if !found {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cmdDisconnect disconnects by NQN (every controller of the subsystem)
// or by device: a path name (nvmeof0c1, or nvmeof0 while other paths
// remain) disconnects that controller only, as `nvme disconnect -d
// nvme1` does to one controller of a multipath subsystem; any other
// device names the whole daemon.
func cmdDisconnect(c *cli.Context) error {
	nqn, dev := c.String("nqn"), c.String("device")
	if (nqn == "") == (dev == "") {
		return errors.New("need either --nqn (-n) NQN or --device (-d) DEVICE")
	}
	runDir := c.String("run-dir")
	if dev != "" {
		if e, _, ok := findPath(c, runDir, dev); ok {
			name := strings.TrimPrefix(dev, "/dev/")
			// As nvme-cli's disconnect -d, silent on success.
			_, err := disconnectRequest(c, e, session.Request{Op: session.OpRemovePath, Path: name})
			return err
		}
		t, err := resolveDevice(c, runDir, dev)
		if err != nil {
			return err
		}
		return disconnectEntry(c, t.entry)
	}
	live, _, err := session.Scan(runDir)
	if err != nil {
		return trimErr(err)
	}
	var errs []string
	n := 0
	for _, e := range live {
		st := liveState(c, e)
		if st == nil || st.SubsysNQN != nqn {
			continue
		}
		if err := disconnectEntry(c, e); err != nil {
			errs = append(errs, err.Error())
			continue
		}
		n += nPaths(st)
	}
	fmt.Fprintf(c.App.Writer, "NQN:%s disconnected %d controller(s)\n", nqn, n)
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

func cmdDisconnectAll(c *cli.Context) error {
	live, _, err := session.Scan(c.String("run-dir"))
	if err != nil {
		return trimErr(err)
	}
	var errs []string
	for _, e := range live {
		if e.State == nil {
			continue // still starting: its connect command is in charge
		}
		if err := disconnectEntry(c, e); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}
