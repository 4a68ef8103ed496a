package hostcli

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/nvmeof/nvmeof/initiator/session"
	"github.com/nvmeof/nvmeof/internal/softcc"
	"github.com/nvmeof/nvmeof/rdma/soft"
)

// connectExtraFlags are nvme-cli's -D/--duplicate-connect,
// --fast_io_fail_tmo and -T/--tos (part of its NVMF_OPTS, so discover and
// connect-all take them too).
func connectExtraFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "duplicate-connect", Aliases: []string{"D"},
			Usage: "connect even when a controller of the same subsystem, address and host NQN is connected (otherwise refused)"},
		&cli.IntFlag{Name: "fast_io_fail_tmo", Aliases: []string{"f"}, Value: -1,
			Usage: "`SECONDS` after a connection loss after which I/O fails instead of waiting for the reconnection (-1: wait until ctrl-loss-tmo)"},
		&cli.StringFlag{Name: "iopolicy", DefaultText: "numa",
			Usage: "multipath I/O `POLICY` of the subsystem's namespaces: numa (one optimized path), round-robin (the optimized paths in turn) or queue-depth (the optimized path with the fewest I/Os in flight); given on a connect that adds a path, it changes the subsystem's policy"},
		&cli.IntFlag{Name: "tos", Aliases: []string{"T"}, Value: -1,
			Usage: "IP type of service `TOS` (DSCP << 2 | ECN, 0-255) of the RDMA or TCP connections; -1: the default (0). RDMA: set on the connections' QPs (the CM REQ's traffic class, the target's QP follows it): ibverbs with rdma_set_option, soft as every datagram's IP TOS / IPv6 traffic class; tcp: the sockets' IP_TOS / IPV6_TCLASS"},
		&cli.StringFlag{Name: "congestion", DefaultText: "off",
			Usage: "RoCEv2 congestion control of the soft RDMA provider (ECN, CNPs, DCQCN; docs/congestion.md): `on`, off, or KEY=VALUE,... with the keys of nvmetd's congestion block (ecn=ect0|ect1, min_cnp_interval=50us, cnp_dscp, line_rate=10Gbit, min_rate, additive_increase, hyper_increase, g, alpha_period, increase_period, rate_reduce_period, byte_counter, fast_recovery_steps), which turn it on; soft provider only"},
	}
}

// congestion parses --congestion: the soft device's congestion control
// (nil: off).
func (a connectArgs) congestion() (*soft.CongestionConfig, error) {
	cc, err := softcc.Parse(a.Congestion)
	if err != nil {
		return nil, fmt.Errorf("--%w", err)
	}
	if cc != nil && a.Transport != "" && a.Transport != "rdma" {
		return nil, fmt.Errorf("--congestion is RoCEv2 congestion control of the soft RDMA provider: not for transport %s", a.Transport)
	}
	return cc, nil
}

// fastIOFail converts --fast_io_fail_tmo as Linux's nvmf_parse_options:
// -1 off, 0 fail at once, N seconds.
func (a connectArgs) fastIOFail() (time.Duration, error) {
	switch v := a.FastIOFailTmo; {
	case v < -1:
		return 0, fmt.Errorf("fast_io_fail_tmo %d: want -1 (off) or a number of seconds", v)
	case v == -1:
		return 0, nil
	case v == 0:
		return time.Nanosecond, nil
	default:
		return time.Duration(v) * time.Second, nil
	}
}

// tos validates --tos: the byte to set and whether to set it.
func (a connectArgs) tos() (uint8, bool, error) {
	switch v := a.TOS; {
	case v == -1:
		return 0, false, nil
	case v < -1 || v > 255:
		return 0, false, fmt.Errorf("tos %d: want 0 to 255 (or -1 for the default)", v)
	default:
		return uint8(v), true, nil
	}
}

// sameHost reports whether a live connection was made for the same host
// (nvmf_ctlr_matches_baseopts: host NQN, and the host address when both
// name one) as a.
func sameHost(st *session.State, a connectArgs) bool {
	if a.HostNQN != "" && st.HostNQN != "" && st.HostNQN != a.HostNQN {
		return false
	}
	return a.HostTraddr == "" || st.HostTraddr == "" || st.HostTraddr == a.HostTraddr
}
