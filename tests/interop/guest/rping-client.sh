#!/bin/bash
# rping-client.sh - the guest's rping (rdmacm-utils) as client over rxe:
#   rping -c -a $RPING_SERVER -C $RPING_COUNT -V -v
# against a server on the host side (started by --host-cmd before the guest boots).
#
# env (defaults):
#   RPING_SERVER=$KPEER_HOST_ADDR (192.0.2.1)   RPING_PORT=7174
#   RPING_COUNT=100   RPING_SIZE=64   RPING_TRIES=5 (connection attempts, 3 s apart)
# Exit: rping's status, or 1 when it printed a wrong number of pings.
set -u
LIB="${KPEER_LIB:-$(cd "$(dirname "$0")" && pwd)}"
RPING_SERVER="${RPING_SERVER:-${KPEER_HOST_ADDR:-192.0.2.1}}"
RPING_PORT="${RPING_PORT:-7174}"
RPING_COUNT="${RPING_COUNT:-100}"
RPING_SIZE="${RPING_SIZE:-64}"
RPING_TRIES="${RPING_TRIES:-5}"
SIGNAL="${KPEER_SIGNAL:-/tmp/kpeer-signal}"
mkdir -p "$SIGNAL"
trap 'touch "$SIGNAL/release"' EXIT

echo "=== rxe [t=$(cut -d' ' -f1 /proc/uptime)s]"
# shellcheck source=/dev/null
. "$LIB/rxe-up.sh" || { echo "FAIL: rxe setup"; exit 1; }

out=/tmp/rping-client.out
rc=1
for try in $(seq "$RPING_TRIES"); do
  echo "=== rping -c -a $RPING_SERVER -p $RPING_PORT -C $RPING_COUNT -S $RPING_SIZE -V -v (try $try) [t=$(cut -d' ' -f1 /proc/uptime)s]"
  timeout 300 rping -c -a "$RPING_SERVER" -p "$RPING_PORT" -C "$RPING_COUNT" -S "$RPING_SIZE" -V -v > "$out" 2>&1
  rc=$?
  n=$(grep -c '^ping data: rdma-ping-' "$out")
  echo "rping exit status $rc, $n pings"
  head -n 3 "$out"; echo ...; tail -n 5 "$out"
  # Retry only when nothing was exchanged (the server was not listening yet).
  [ "$rc" -eq 0 ] || [ "$n" -gt 0 ] && break
  sleep 3
done
rxe_counters
if [ "$rc" -ne 0 ]; then
  echo "FAIL: rping client exit status $rc"
  exit "$rc"
fi
if [ "$n" -ne "$RPING_COUNT" ]; then
  echo "FAIL: $n pings printed, want $RPING_COUNT"
  exit 1
fi
echo "PASS: $n pings validated"
exit 0
