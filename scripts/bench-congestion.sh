#!/usr/bin/env bash
# bench-congestion.sh - RoCEv2 congestion control through a real
# bottleneck (issue 26): nvmetd on the soft provider in a kernel-peer guest
# whose eth0 egress is a tbf at -rate with a red child that marks ECN
# (bench/congestion/target.sh), and three hosts reading from it at once in
# kernel-peer's network namespace (bench/congestion/host.sh: two 128 KiB
# sequential readers at QD8 and a 4 KiB QD1 probe, each a fio process with
# our engine on its own address). Rounds alternate congestion control off
# (ECN off: red drops what it would mark) and on (nvmetd's port and the
# engines); the report gives each round and the medians per mode: goodput,
# the bottleneck's use, retransmissions, timeouts, CNPs, marks, drops, the
# bulk flows' shares and the probe's latency, and the issue's goals.
#
# usage: sudo scripts/bench-congestion.sh [-rate 40mbit] [-rounds "off on off on"]
#          [-runtime 20] [-dcqcn KEY=VALUE:...] [-red "red parameters"] [-out DIR]
#   -dcqcn  the congestion block's keys for both sides (docs/congestion.md),
#           ':'-separated; the default scales DCQCN's timers to the slow
#           bottleneck (see docs/congestion.md, "Through a bottleneck")
# env: KPEER_DIR (default ../shared/kernel-peer), KPEER_CACHE, KPEER_KERNEL
#
# Takes about 40 s of boot plus (runtime + 15 s) per round.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
RATE=40mbit ROUNDS="off on off on" RUNTIME=20 RAMP=5 OUT=""
RED="limit 400000 min 30000 max 90000 avpkt 4096 burst 20 probability 0.1"
DCQCN="line_rate=100Mbit:min_rate=100kbit:additive_increase=400kbit:hyper_increase=4Mbit:increase_period=5ms:alpha_period=5ms:rate_reduce_period=400us:min_cnp_interval=1ms:byte_counter=100KiB"
while [ $# -gt 0 ]; do
	case "$1" in
	-rate) RATE=$2; shift 2 ;;
	-rounds) ROUNDS=$2; shift 2 ;;
	-runtime) RUNTIME=$2; shift 2 ;;
	-dcqcn) DCQCN=$2; shift 2 ;;
	-red) RED=$2; shift 2 ;;
	-out) OUT=$2; shift 2 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "unknown argument $1" >&2; exit 2 ;;
	esac
done
[ "$(id -u)" = 0 ] || { echo "bench-congestion.sh: must run as root (kernel-peer)" >&2; exit 1; }
KPEER_DIR="${KPEER_DIR:-$(cd .. && pwd)/shared/kernel-peer}"
[ -x "$KPEER_DIR/run.sh" ] || { echo "no kernel-peer at $KPEER_DIR" >&2; exit 1; }
OUT="${OUT:-bench-out/congestion-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SHARE="$OUT/share"
rm -rf "$SHARE"
mkdir -p "$SHARE/bin" "$SHARE/interop/guest"
NQN=nqn.2026-12.io.nvmeof:congestion

echo "== building nvmetd and the fio engine"
CGO_ENABLED=0 go build -o "$SHARE/bin/nvmetd" ./cmd/nvmetd
./scripts/build-fio-engine.sh "$OUT/fio-nvmeof.so" >/dev/null
cp tests/interop/guest/lib.sh "$SHARE/interop/guest/"
# The block's keys, one per line, as HCL.
BLOCK=$(tr ':' '\n' <<<"$DCQCN" | sed -E 's/^([a-z_]+)=(.*)$/    \1 = "\2"/')
nrounds=$(wc -w <<<"$ROUNDS")

echo "== kernel-peer${KPEER_KERNEL:+ (kernel $KPEER_KERNEL)}: bottleneck tbf $RATE + red ecn; rounds: $ROUNDS; ${RUNTIME}s each"
t0=$(date +%s)
rc=0
"$KPEER_DIR/run.sh" --share "$SHARE" --smp 2 --timeout $((600 + nrounds * (RUNTIME + RAMP + 120))) \
	--env CC_NQN="$NQN" --env CC_ROUNDS="$ROUNDS" --env CC_RATE="$RATE" --env CC_RED="$RED" \
	--env "CC_BLOCK=$BLOCK" \
	--host-test "CC_NQN=$NQN CC_ROUNDS='$ROUNDS' CC_FIO_ENGINE='$OUT/fio-nvmeof.so' CC_RUNTIME_S=$RUNTIME CC_RAMP_S=$RAMP CC_ENGINE='$DCQCN' bash '$ROOT/bench/congestion/host.sh'" \
	"$ROOT/bench/congestion/target.sh" > "$OUT/run.log" 2>&1 || rc=$?
echo "session: $(( $(date +%s) - t0 )) s, status $rc (logs in $SHARE/out)"
if [ "$rc" != 0 ]; then
	tail -n 30 "$OUT/run.log"
	grep -h '^FAIL' "$SHARE"/out/*/script.log "$SHARE"/out/host-test.log 2>/dev/null || true
	exit "$rc"
fi
go run ./bench/congestion -dir "$SHARE/out" -rate "$RATE" -skip "$RAMP" -json "$OUT/bench-congestion.json" \
	-meta rate="$RATE" -meta red="$RED" -meta dcqcn="$DCQCN" -meta runtime_s="$RUNTIME" \
	-meta guests="QEMU TCG, 2 vCPUs${KPEER_KERNEL:+, kernel $KPEER_KERNEL}" \
	-meta date="$(date -u +%FT%TZ)" -meta commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "JSON: $OUT/bench-congestion.json"
