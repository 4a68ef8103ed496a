#!/bin/bash
# conformance.sh - the rdma provider-conformance suite (rdma/rdmatest) of the
# ibverbs provider, run in the guest against rxe0 on eth0: the test binary
# $CONFORMANCE_BIN was built on the host with
#   CGO_ENABLED=1 go test -c -tags ibverbs -o <share>/ibverbs.test ./rdma/ibverbs
# and runs here with NVMEOF_IBVERBS_ADDR=$KPEER_IP NVMEOF_IBVERBS_DEVICE=rxe0.
#
# env (defaults):
#   CONFORMANCE_BIN=/share/ibverbs.test   CONFORMANCE_RUN=TestConformance (-test.run)
#   CONFORMANCE_SKIP (-test.skip pattern, none by default)   CONFORMANCE_TIMEOUT=15m (-test.timeout)
#   NVMEOF_CONFORMANCE_LARGE (bytes of the multi-MiB transfers; the test's default if unset)
#   NVMEOF_CONFORMANCE_TIMEOUT (each wait for a completion or event; the test's default if unset)
#   Any other NVMEOF_* variable given with run.sh --env reaches the test binary: e.g.
#   NVMEOF_IBVERBS_ADDR2=192.0.2.2 opens the device a second time for the passive
#   ends (two contexts, as two processes would be).
# The test's output also goes to $KPEER_OUT/conformance.log, as it comes.
# Exit: the test binary's status (0 = every conformance test passed or skipped).
set -u
LIB="${KPEER_LIB:-$(cd "$(dirname "$0")" && pwd)}"
BIN="${CONFORMANCE_BIN:-${KPEER_SHARE:-/share}/ibverbs.test}"
RUN="${CONFORMANCE_RUN:-TestConformance}"
TIMEOUT="${CONFORMANCE_TIMEOUT:-15m}"
SKIP="${CONFORMANCE_SKIP:-}"

echo "=== rxe [t=$(cut -d' ' -f1 /proc/uptime)s]"
# shellcheck source=/dev/null
. "$LIB/rxe-up.sh" || { echo "FAIL: rxe setup"; exit 1; }

if [ ! -x "$BIN" ]; then
  echo "FAIL: no test binary at $BIN"
  exit 1
fi
# Registered memory is pinned: no lock limit for the test.
ulimit -l unlimited 2>/dev/null || echo "note: ulimit -l unlimited failed ($(ulimit -l))"

# The output goes to the share as it comes (a hung test shows where).
out="${KPEER_OUT:-/tmp}/conformance.log"
echo "=== $BIN -test.v -test.run $RUN -test.skip '$SKIP' -test.timeout $TIMEOUT (NVMEOF_IBVERBS_ADDR=$KPEER_IP NVMEOF_IBVERBS_DEVICE=$RXE_NAME) [t=$(cut -d' ' -f1 /proc/uptime)s]"
cd /tmp || exit 1
NVMEOF_IBVERBS_ADDR="$KPEER_IP" NVMEOF_IBVERBS_DEVICE="$RXE_NAME" GOTRACEBACK=all \
  "$BIN" -test.v -test.run "$RUN" -test.skip "$SKIP" -test.timeout "$TIMEOUT" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
echo "=== [t=$(cut -d' ' -f1 /proc/uptime)s] test binary exit status $rc"
rxe_counters
echo "== dmesg (rxe, last 20 lines)"
dmesg | grep -i -E 'rxe|rdma|infiniband' | tail -n 20
npass=$(grep -c -E '^ *--- PASS' "$out")
nfail=$(grep -c -E '^ *--- FAIL' "$out")
nskip=$(grep -c -E '^ *--- SKIP' "$out")
echo "conformance: $npass passed, $nfail failed, $nskip skipped (counts include the parent tests)"
if [ "$rc" -ne 0 ]; then
  echo "FAIL: conformance suite exit status $rc"
  grep -E '^ *--- FAIL' "$out"
  exit "$rc"
fi
echo "PASS: conformance suite"
exit 0
