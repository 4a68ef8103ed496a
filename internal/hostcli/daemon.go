package hostcli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/initiator/session"
	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/provider"
)

// giveUpAfter is how long the daemon lets the controller reconnect before
// it gives up itself (see session.Config.GiveUpAfter): ctrl-loss-tmo, one
// more reconnect delay and a grace period for the attempt in progress.
func giveUpAfter(o initiator.Options) time.Duration {
	if o.CtrlLossTimeout < 0 {
		return 0 // reconnect forever
	}
	loss, delay := o.CtrlLossTimeout, o.ReconnectDelay
	if loss == 0 {
		loss = initiator.DefaultCtrlLossTimeout
	}
	if delay <= 0 {
		delay = initiator.DefaultReconnectDelay
	}
	return loss + delay + 3*time.Second
}

// cmdDaemon is the background process of one connection: it connects,
// maps the namespaces, reports to the connect command over descriptor 4
// and serves until disconnected.
func cmdDaemon(c *cli.Context) error {
	runDir := c.String("run-dir")
	slot, rep, err := session.Inherited(runDir, c.String("name"))
	if err != nil {
		return err
	}
	var a connectArgs
	if err := json.Unmarshal([]byte(c.String("spec")), &a); err != nil {
		rep.Send(session.Report{Error: "bad connection spec: " + err.Error()})
		return err
	}
	log, closeLog, err := daemonLogger(c, slot.Name, a.NQN, hclog.LevelFromString(a.LogLevel)) // logtarget.go
	if err != nil {
		fmt.Fprintln(c.App.ErrWriter, err)
		rep.Send(session.Report{Error: err.Error()})
		return err
	}
	defer closeLog()
	fail := func(msg string) error {
		log.Error("connect failed", "error", msg)
		rep.Send(session.Report{Error: msg})
		return errors.New(msg)
	}
	if a.DHChap {
		// Kept in this process's memory only, for the reconnects.
		if err := readSecrets(secretsFD, &a); err != nil {
			return fail(err.Error())
		}
	}
	opts, err := a.options()
	a.DHChapSecret, a.DHChapCtrlSecret = "", ""
	if err != nil {
		return fail(err.Error())
	}
	method, none, err := a.mapMethod()
	if err != nil {
		return fail(err.Error())
	}
	// Catch the signals before anything needs cleaning up.
	stop := make(chan os.Signal, 2)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)

	tr, err := openTransport(a, log)
	if err != nil {
		return fail(trimPrefixes(err.Error()))
	}
	info := session.State{
		Transport:  a.Transport,
		Traddr:     a.Traddr,
		Trsvcid:    a.Trsvcid,
		HostTraddr: tr.host,
		SubsysNQN:  a.NQN,
		Log:        logWhere(c.String("log-target"), runDir, slot.Name),
	}
	policy, err := a.ioPolicy()
	if err != nil {
		tr.close()
		return fail(err.Error())
	}
	var d *session.Daemon
	pool := &devicePool{}
	pool.add(tr)
	addPathFn := func(ctx context.Context, spec json.RawMessage) (*initiator.Controller, session.PathState, func() error, error) {
		return daemonAddPath(ctx, d, opts, pool, spec, log)
	}
	cfg := session.Config{None: none, Method: method, GiveUpAfter: giveUpAfter(opts), IOPolicy: policy, AddPath: addPathFn}
	if tr.rdev != nil {
		cfg.RDMAStats = func() ([]session.DeviceCounters, error) {
			return rdmaCounters(append([]*transport{tr}, pool.list()...))
		}
	}
	d = session.NewDaemon(slot, info, cfg, log)
	opts.OnAsyncEvent = d.AsyncEvent
	opts.Logger = log
	args := []any{"transport", a.Transport, "traddr", a.Traddr, "trsvcid", a.Trsvcid, "nqn", a.NQN, "host_traddr", tr.host,
		"fast_io_fail_tmo", a.FastIOFailTmo, "tos", a.TOS}
	if tr.dev.Name != "" {
		args = append(args, tr.dev.LogArgs()...)
	}
	log.Info("connecting", args...)
	ctx, cancel := context.WithTimeout(context.Background(), a.Timeout)
	ctrl, err := initiator.Connect(ctx, tr.dialer, tr.addr, opts)
	cancel()
	if err != nil {
		tr.close()
		return fail(describeConnectError(err, a, tr))
	}
	d.Attach(ctrl, tr.close)
	stopMetrics, err := startDaemonMetrics(c, ctrl, slot.Name, tr.rdev, log) // metrics.go
	if err != nil {
		d.Abort()
		return fail(trimPrefixes(err.Error()))
	}
	defer stopMetrics()
	log.Info("connected", "cntlid", ctrl.CntlID(), "io_queues", ctrl.NumIOQueues(), "namespaces", len(ctrl.Namespaces()))
	mctx, mcancel := context.WithTimeout(context.Background(), mapTimeout)
	err = d.MapAll(mctx)
	mcancel()
	if err != nil {
		d.Abort()
		return fail(trimPrefixes(err.Error()))
	}
	if err := d.Start(); err != nil {
		d.Abort()
		return fail(trimPrefixes(err.Error()))
	}
	if err := rep.Send(session.Report{State: d.Snapshot()}); err != nil {
		log.Warn("the connect command did not get the report", "error", err)
	}
	err = d.Serve(stop)
	slot.Release()
	if err != nil {
		log.Error("daemon exiting", "error", err)
		return err
	}
	log.Info("disconnected; daemon exiting")
	return nil
}

// rdmaCounters reads the counters of the RDMA devices of trs, each
// device once.
func rdmaCounters(trs []*transport) ([]session.DeviceCounters, error) {
	var out []session.DeviceCounters
	seen := map[rdma.Device]bool{}
	for _, tr := range trs {
		if tr.rdev == nil || seen[tr.rdev] {
			continue
		}
		seen[tr.rdev] = true
		c, err := provider.Counters(tr.rdev)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", tr.dev.Name, err)
		}
		out = append(out, session.DeviceCounters{Device: tr.dev.Name, Provider: tr.dev.Provider, Counters: c})
	}
	return out, nil
}

// daemonAddPath connects another path of the daemon's subsystem for an
// add-path request: spec is the connect command's arguments; the host
// identity and the DH-HMAC-CHAP keys are the daemon's own (first
// connect's), the address, transport and timeouts the new connect's.
func daemonAddPath(ctx context.Context, d *session.Daemon, base initiator.Options, pool *devicePool, spec json.RawMessage, log hclog.Logger) (*initiator.Controller, session.PathState, func() error, error) {
	var a connectArgs
	if err := json.Unmarshal(spec, &a); err != nil {
		return nil, session.PathState{}, nil, fmt.Errorf("bad path spec: %w", err)
	}
	opts, err := a.options()
	if err != nil {
		return nil, session.PathState{}, nil, err
	}
	if opts.SubsystemNQN != base.SubsystemNQN {
		return nil, session.PathState{}, nil, fmt.Errorf("path to %s, but this daemon holds %s", opts.SubsystemNQN, base.SubsystemNQN)
	}
	opts.HostNQN, opts.HostID = base.HostNQN, base.HostID
	opts.HostKey, opts.CtrlKey = base.HostKey, base.CtrlKey
	opts.OnAsyncEvent = d.AsyncEvent
	plog := log.With("path", a.Transport+" "+a.Traddr+":"+a.Trsvcid)
	opts.Logger = plog
	tr, err := pathTransport(a, pool, plog)
	if err != nil {
		return nil, session.PathState{}, nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, a.Timeout)
	defer cancel()
	plog.Info("connecting another path")
	ctrl, err := initiator.Connect(cctx, tr.dialer, tr.addr, opts)
	if err != nil {
		tr.close()
		return nil, session.PathState{}, nil, errors.New(describeConnectError(err, a, tr))
	}
	return ctrl, session.PathState{Transport: a.Transport, Traddr: a.Traddr, Trsvcid: a.Trsvcid, HostTraddr: tr.host}, tr.close, nil
}

// devicePool is the RDMA devices a daemon opened, for the paths it adds
// later to share.
type devicePool struct {
	mu  sync.Mutex
	trs []*transport
}

// add records an opened transport.
func (p *devicePool) add(tr *transport) {
	if tr.shared == nil {
		return
	}
	p.mu.Lock()
	p.trs = append(p.trs, tr)
	p.mu.Unlock()
}

// list returns the transports recorded.
func (p *devicePool) list() []*transport {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*transport(nil), p.trs...)
}

// pathTransport returns the transport of a path added to a daemon: an
// RDMA device it has open on the path's host address when there is one
// (a soft RoCE device owns its address's UDP port, so a second one there
// cannot open), else a new one (recorded in pool). The device closes
// when the last path using it closes its transport.
func pathTransport(a connectArgs, pool *devicePool, log hclog.Logger) (*transport, error) {
	addr, err := a.address()
	if err != nil {
		return nil, err
	}
	if addr.Transport != transportLoop {
		if cands, err := hostAddrs(addr.Addr, a.HostTraddr); err == nil {
			for _, tr := range pool.list() {
				if tr.addr.Transport != addr.Transport || tr.host == "" {
					continue
				}
				for _, h := range cands {
					if h.String() != tr.host {
						continue
					}
					if closeFn, ok := tr.shared.hold(); ok {
						log.Debug("path shares the RDMA device", "host_traddr", tr.host)
						return &transport{dialer: tr.dialer, addr: addr, host: tr.host, dev: tr.dev, rdev: tr.rdev, close: closeFn, shared: tr.shared}, nil
					}
				}
			}
		}
	}
	tr, err := openTransport(a, log)
	if err != nil {
		return nil, err
	}
	pool.add(tr)
	return tr, nil
}
