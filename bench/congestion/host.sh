#!/bin/bash
# host.sh - the host side (--host-test, in kernel-peer's network namespace,
# native speed) of scripts/bench-congestion.sh: for each round guest a
# offers (cc-ready-<i> says off or on), the hosts of CC_FLOWS read from
# nvmetd through the bottleneck at the same time, each a fio process with
# our engine on its own address and soft RoCE device:
#   bulk-a  192.0.2.11  128 KiB sequential read, QD8
#   bulk-b  192.0.2.12  the same
#   probe   192.0.2.13  4 KiB random read, QD1 (the latency of a third flow)
# With congestion control on, the engines run it too (CC_ENGINE, the fio
# engine's congestion= value). nvmetd's metrics are scraped before and
# after each round, and its per-QP rates once a second; fio's JSON goes
# to $KPEER_SHARE/out/host/.
#
# env (from run.sh): KPEER_SHARE KPEER_SIGNAL KPEER_BRIDGE; (from the
#   wrapper): CC_NQN CC_ROUNDS CC_ENGINE CC_FIO_ENGINE (the .so)
#   CC_FLOWS="bulk-a bulk-b probe"  CC_RUNTIME_S=30 CC_RAMP_S=5
#   CC_WAIT_S=900  CC_SNAPSHOT_S (nvmetd's goroutines that many seconds
#   into each round; nvmetd needs --pprof)
set -u
NQN="${CC_NQN:?}"
ROUNDS="${CC_ROUNDS:-off on}"
ENGINE="${CC_FIO_ENGINE:?}"
FLOWS="${CC_FLOWS:-bulk-a bulk-b probe}"
RUNTIME="${CC_RUNTIME_S:-30}"
RAMP="${CC_RAMP_S:-5}"
WAIT_S="${CC_WAIT_S:-900}"
SIG="${KPEER_SIGNAL:?}"
OUT="${KPEER_SHARE:?}/out/host"
TARGET=192.0.2.2
mkdir -p "$OUT"
fail() { echo "FAIL: $*"; touch "$SIG/abort"; exit 1; }
wait_sig() { # wait_sig NAME: wait for the guest's signal file
  local end=$(($(date +%s) + WAIT_S))
  while [ ! -e "$SIG/$1" ]; do
    [ -e "$SIG/abort" ] && fail "aborted while waiting for $1"
    [ "$(date +%s)" -lt "$end" ] || fail "no $1 after $WAIT_S s"
    sleep 0.2
  done
}
for a in 11 12 13; do ip addr add "192.0.2.$a/24" dev "${KPEER_BRIDGE:?}" || fail "address 192.0.2.$a"; done

fio_run() { # fio_run NAME CONGESTION: flow NAME's fio
  local host args
  case $1 in
  bulk-a) host=192.0.2.11 args="--rw=read --bs=128k --iodepth=8" ;;
  bulk-b) host=192.0.2.12 args="--rw=read --bs=128k --iodepth=8" ;;
  probe) host=192.0.2.13 args="--rw=randread --bs=4k --iodepth=1" ;;
  *) echo "unknown flow $1" >&2; return 2 ;;
  esac
  # shellcheck disable=SC2086
  fio --name="$1" --ioengine=external:"$ENGINE" --traddr=$TARGET --trsvcid=4420 --subnqn="$NQN" \
    --host_traddr="$host" --nsid=1 --congestion="$2" --time_based --runtime="$RUNTIME" --ramp_time="$RAMP" \
    --group_reporting --output-format=json $args
}

sample() { # nvmetd's rate-related series once a second while PID lives
  while kill -0 "$1" 2>/dev/null; do
    echo "# $(date +%s.%N | cut -c1-14)"
    curl -fsS -m 5 "http://$TARGET:9100/metrics" |
      grep -E '^nvmeof_rdma_(qp_rp_rate|qp_rp_limited|qp_packets_sent|qp_retransmissions|qp_rp_cnp_handled|packets_sent_total|retransmissions_total)'
    sleep 1
  done
}

i=0
for want in $ROUNDS; do
  i=$((i + 1))
  wait_sig "cc-ready-$i"
  mode=$(cat "$SIG/cc-ready-$i")
  [ "$mode" = "$want" ] || fail "round $i: guest says $mode, want $want"
  cc=off
  [ "$mode" = on ] && cc="${CC_ENGINE:-on}"
  echo "=== round $i: congestion control $mode (engine congestion=$cc) $(date -u +%T)"
  curl -fsS "http://$TARGET:9100/metrics" > "$OUT/metrics-$i-before.txt" || fail "metrics"
  pids=""
  for f in $FLOWS; do
    fio_run "$f" "$cc" > "$OUT/fio-$i-$f.json" 2> "$OUT/fio-$i-$f.err" &
    pids="$pids $!"
  done
  first=${pids# }
  sample "${first%% *}" > "$OUT/samples-$i.txt" &
  if [ -n "${CC_SNAPSHOT_S:-}" ]; then
    (sleep "$CC_SNAPSHOT_S"; curl -sS -m 60 "http://$TARGET:9100/debug/pprof/goroutine?debug=2" > "$OUT/goroutines-$i.txt") &
  fi
  rc=0
  for p in $pids; do wait "$p" || rc=$?; done
  curl -fsS "http://$TARGET:9100/metrics" > "$OUT/metrics-$i-after.txt" || fail "metrics"
  echo "$mode" > "$OUT/mode-$i"
  touch "$SIG/cc-done-$i"
  [ "$rc" = 0 ] || { tail -n 5 "$OUT"/fio-"$i"-*.err; fail "round $i: fio exit status $rc"; }
done
echo "host: $i rounds done"
