#!/bin/bash
# target.sh - guest a of scripts/bench-congestion.sh: nvmetd on the soft
# RoCE provider behind a bottleneck that marks ECN, as a switch port would:
# eth0's egress (the direction of read data) goes through tbf at
# CC_RATE with a red child that marks ECN-capable packets CE (and drops
# the others) between its thresholds.
#
# For each round R in CC_ROUNDS (e.g. "off on off on"): the qdisc is
# rebuilt (its counters start at 0), nvmetd starts with a congestion block
# (on) or without (off), target-ready (first round) and cc-ready-<i> are
# signalled; after cc-done-<i> from the host side the qdisc's counters go
# to $KPEER_OUT/tc-<i>.txt and nvmetd stops.
#
# env: CC_NQN  CC_ROUNDS="off on"  CC_RATE=100mbit  CC_RED (red's
#   parameters, default below; none: tbf alone, tail drop)  CC_BLOCK (the congestion block's keys,
#   HCL)  CC_NVMETD_ARGS  CC_WAIT_S=900
set -u
# shellcheck source=/dev/null
. "${INTEROP:-/share/interop}/guest/lib.sh"
NQN="${CC_NQN:?}"
ROUNDS="${CC_ROUNDS:-off on}"
RATE="${CC_RATE:-100mbit}"
RED="${CC_RED:-limit 400000 min 30000 max 90000 avpkt 4096 burst 20 probability 0.1}"
WAIT_S="${CC_WAIT_S:-900}"
ADDR="${KPEER_IP:-192.0.2.2}"
finish() {
  touch "$SIGNAL/cc-target-finished"
  if [ "$NFAIL" = 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL ($NFAIL failed checks)"; fi
  [ "$NFAIL" = 0 ]
  exit $?
}
trap finish EXIT

install_bins
echo "$(nproc) CPUs, $(awk '/MemTotal/ {print $2/1024 " MiB"}' /proc/meminfo), kernel $(uname -r)"
# The soft provider needs UDP 4791 (rxe is not loaded in this guest).
lsmod | grep -q rdma_rxe && { modprobe -r rdma_rxe || abort "rdma_rxe is loaded"; }
modprobe sch_tbf && modprobe sch_red || abort "modprobe sch_tbf sch_red"

bottleneck() {
  tc qdisc del dev eth0 root 2>/dev/null
  tc qdisc add dev eth0 root handle 1: tbf rate "$RATE" burst 32k latency 100ms || abort "qdisc tbf"
  [ "$RED" = none ] && return
  # shellcheck disable=SC2086
  tc qdisc add dev eth0 parent 1: handle 10: red $RED bandwidth "$RATE" ecn || abort "qdisc red"
}

config() { # config MODE FILE
  local block=""
  [ "$1" = on ] && block="  congestion {
    enabled = true
${CC_BLOCK:-}
  }"
  cat > "$2" <<HCL
log_level = "info"
port "cc" {
  transport = "rdma"
  provider  = "soft"
  address   = "$ADDR"
  service   = 4420
$block
}
subsystem "$NQN" {
  ports          = ["cc"]
  allow_any_host = true
  namespace "1" {
    backend    = "null"
    size       = "64GiB"
    block_size = 4096
  }
}
HCL
}

i=0
for mode in $ROUNDS; do
  i=$((i + 1))
  step "round $i: congestion control $mode, bottleneck tbf $RATE + red ecn"
  bottleneck
  config "$mode" "$OUT/nvmetd-$i.hcl"
  cat "$OUT/nvmetd-$i.hcl"
  # shellcheck disable=SC2086
  nvmetd --config "$OUT/nvmetd-$i.hcl" --metrics-address "$ADDR:9100" --metrics-per-queue ${CC_NVMETD_ARGS:-} > "$OUT/nvmetd-$i.log" 2>&1 &
  pid=$! ok=0
  for _ in $(seq 300); do grep -q '\blistening\b' "$OUT/nvmetd-$i.log" && { ok=1; break; }; kill -0 "$pid" || break; sleep 0.2; done
  [ "$ok" = 1 ] || { tail -n 30 "$OUT/nvmetd-$i.log"; abort "nvmetd did not start"; }
  [ "$i" = 1 ] && put_signal target-ready
  put_signal "cc-ready-$i" "$mode"
  # The bottleneck once a second: uptime, bytes tbf has sent, its backlog
  # (bytes, packets).
  (while [ ! -e "$SIGNAL/cc-done-$i" ]; do
    echo "$(ts) $(tc -s qdisc show dev eth0 | awk '/^qdisc tbf/ {t=1} t && /Sent/ {s=$2} t && /backlog/ {print s, $2, $3; exit}')"
    sleep 1
  done) > "$OUT/queue-$i.txt" &
  wait_signal "cc-done-$i" "$WAIT_S" || { kill "$pid"; abort "no cc-done-$i"; }
  tc -s qdisc show dev eth0 > "$OUT/tc-$i.txt"
  cat "$OUT/tc-$i.txt"
  kill -TERM "$pid"; wait "$pid"; rc=$?
  [ "$rc" = 0 ] && pass "round $i: nvmetd served and stopped" || failc "round $i: nvmetd exit status $rc"
done
exit 0
