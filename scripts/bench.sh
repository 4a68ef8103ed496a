#!/usr/bin/env bash
# The side-by-side benchmark, in one run: UDP ceilings on loopback, fio
# through nbdkit's memory plugin (fio's nbd engine, over TCP), and fio
# through our NVMe-oF engine against nvmetd, over one or more topologies, in
# interleaved rounds (medians). Prints one table (IOPS, MB/s, latency, CPU µs
# per I/O on both sides, system calls per I/O, UDP datagrams per I/O; each
# row labelled with its topology, ratios against nbdkit over the same one),
# the Go benchmarks' allocations per I/O and the goals, judged against
# nbdkit in the same run; writes bench-results.json and bench-results.png
# (dated copies under bench-out/).
#
# Topologies (-topology, comma-separated, or all), each with its own servers:
#   loopback  the host's lo (the nvmeof side in a network namespace of its own)
#   veth4     two network namespaces the runner creates, joined by a veth pair
#             (MTU 9000): nbdkit and nvmetd on 192.0.2.1, fio from 192.0.2.2
#             (soft RoCE in raw mode)
#   veth6     the same over IPv6: 2001:db8::1 and 2001:db8::2 (udp6 mode)
# The runner removes the namespaces and the veth pair at the end, also on
# failure or interrupt, and ends the processes it started by their PIDs.
#
#   ./scripts/bench.sh            # 10 s per job, 3 rounds, all three topologies: about an hour
#   ./scripts/bench.sh -quick     # 3 s per job, 3 rounds, loopback: about 8 minutes
#   ./scripts/bench.sh -smoke     # 1 s per job, 1 round, loopback: does everything run? (goals not judged)
#   ./scripts/bench.sh -quick -topology all              # all three: about 25 minutes
#   ./scripts/bench.sh -smoke -topology veth4,veth6      # the two-namespace topologies only
#   ./scripts/bench.sh -strict    # exit status 4 when a goal is missed
#   ./scripts/bench.sh -quick -topology all -nvmeof-transport tcp   # the nvmeof side over NVMe/TCP
#
# Exit status: 0 (missed goals are reported, not enforced, unless -strict),
# 1 when a job failed, 3 when fio or nbdkit is missing.
# Other flags go to the runner: ./scripts/bench.sh -h lists them.
# Needs fio and nbdkit; as root this script installs them with apt-get (and
# linux-perf, for the system call counts). As root it also builds the nvmeof
# side, out/fio-nvmeof.so and out/nvmetd, and the runner starts nvmetd with a
# generated config, in a network namespace (of its own on loopback; the
# server namespace on veth4/veth6), and stops it at the end. Without root
# the nvmeof side and the veth topologies are skipped (the report says why).
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v fio >/dev/null || missing+=(fio)
command -v nbdkit >/dev/null || missing+=(nbdkit)
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
		echo "== apt-get install ${missing[*]}" >&2
		export DEBIAN_FRONTEND=noninteractive
		apt-get install -y "${missing[@]}" >&2 ||
			{ apt-get update >&2 && apt-get install -y "${missing[@]}" >&2; }
	else
		echo "bench.sh: ${missing[*]} not installed: apt-get install ${missing[*]}" >&2
		exit 3
	fi
fi
# perf is optional: without it system calls are not counted (the table says so).
if ! command -v perf >/dev/null && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
	echo "== apt-get install linux-perf (system call counts)" >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y linux-perf >&2 ||
		echo "bench.sh: linux-perf not installed: system calls will not be counted" >&2
fi

help=0
for a in "$@"; do
	case $a in -h | -help | --help) help=1 ;; esac
done

# The runner, built rather than `go run`, so that its PID is the parent of
# nbdkit (--exit-with-parent), nvmetd and fio (Pdeathsig).
mkdir -p out
go build -o out/nvmeof-bench ./bench/cmd/nvmeof-bench
[ "$help" -eq 0 ] || exec out/nvmeof-bench "$@"

# The nvmeof side: our fio engine (fio/engine, built against the installed
# fio's source; the first build fetches it, as root) and nvmetd, both into
# out/ (not committed). The runner runs that side as root only, in a network
# namespace (unshare --net: its soft RoCE devices meet no others and their
# UDP counters count only them); the soft provider itself needs no root on
# loopback, but raw sockets for IPv4 elsewhere (veth4). Without root the
# runner skips the side, and the veth topologies, and says why.
nvmeof=()
if [ "$(id -u)" -eq 0 ]; then
	echo "== building out/fio-nvmeof.so (scripts/build-fio-engine.sh) and out/nvmetd" >&2
	./scripts/build-fio-engine.sh out/fio-nvmeof.so
	go build -o out/nvmetd ./cmd/nvmetd
	nvmeof=(-nvmeof-engine out/fio-nvmeof.so -nvmetd out/nvmetd)
else
	echo "bench.sh: not root: the nvmeof side and the veth topologies will be skipped (they run in network namespaces, which needs root)" >&2
fi

# Flags given to this script come last and win over these.
exec out/nvmeof-bench "${nvmeof[@]}" "$@"
