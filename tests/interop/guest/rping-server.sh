#!/bin/bash
# rping-server.sh - the guest's rping (rdmacm-utils) as server over rxe:
#   rping -s -a $KPEER_IP -p $RPING_PORT -C $RPING_COUNT -V (-v)
# in the background; touches $KPEER_SIGNAL/target-ready once it listens, then
# waits until it exits (the client disconnected) or $KPEER_SIGNAL/release appears.
#
# env (defaults): RPING_PORT=7174 RPING_COUNT=100 RPING_SIZE=64 RPING_WAIT_S=600
# Exit: rping's status; 3 if it was still running at release/timeout, 4 on abort.
set -u
LIB="${KPEER_LIB:-$(cd "$(dirname "$0")" && pwd)}"
ADDR="${KPEER_IP:-192.0.2.2}"
RPING_PORT="${RPING_PORT:-7174}"
RPING_COUNT="${RPING_COUNT:-100}"
RPING_SIZE="${RPING_SIZE:-64}"
RPING_WAIT_S="${RPING_WAIT_S:-600}"
SIGNAL="${KPEER_SIGNAL:-/tmp/kpeer-signal}"
mkdir -p "$SIGNAL"

echo "=== rxe [t=$(cut -d' ' -f1 /proc/uptime)s]"
# shellcheck source=/dev/null
. "$LIB/rxe-up.sh" || { echo "FAIL: rxe setup"; exit 1; }

out=/tmp/rping-server.out
echo "=== rping -s -a $ADDR -p $RPING_PORT -C $RPING_COUNT -S $RPING_SIZE -V -v [t=$(cut -d' ' -f1 /proc/uptime)s]"
rping -s -a "$ADDR" -p "$RPING_PORT" -C "$RPING_COUNT" -S "$RPING_SIZE" -V -v > "$out" 2>&1 &
pid=$!
# rping binds and listens at once; give it a moment, and check it is alive.
sleep 1
if ! kill -0 "$pid" 2>/dev/null; then
  wait "$pid"; rc=$?
  cat "$out"
  echo "FAIL: rping server exited early with status $rc"
  exit 1
fi
touch "$SIGNAL/target-ready"
echo "rping server listening (pid $pid) [t=$(cut -d' ' -f1 /proc/uptime)s]"

rc=""
for _ in $(seq $((RPING_WAIT_S * 2))); do
  if ! kill -0 "$pid" 2>/dev/null; then
    wait "$pid"; rc=$?
    break
  fi
  [ -e "$SIGNAL/abort" ] && { kill "$pid"; cat "$out"; echo "FAIL: aborted"; exit 4; }
  if [ -e "$SIGNAL/release" ]; then
    # The client is done: rping must finish on the disconnect by itself.
    for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid"; wait "$pid"
      n=$(grep -c '^server ping data: rdma-ping-' "$out")
      head -n 3 "$out"; echo ...; tail -n 5 "$out"
      echo "FAIL: rping server still running after the client finished ($n pings)"
      exit 3
    fi
    wait "$pid"; rc=$?
    break
  fi
  sleep 0.5
done
n=$(grep -c '^server ping data: rdma-ping-' "$out")
head -n 3 "$out"; echo ...; tail -n 5 "$out"
rxe_counters
if [ -z "$rc" ]; then
  kill "$pid"
  echo "FAIL: rping server still running after ${RPING_WAIT_S}s"
  exit 3
fi
echo "rping server exit status $rc, $n pings"
if [ "$rc" -ne 0 ]; then
  echo "FAIL: rping server exit status $rc"
  exit "$rc"
fi
echo "PASS: rping server served $n pings"
exit 0
