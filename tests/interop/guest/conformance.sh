#!/bin/bash
# conformance.sh - the rdma provider-conformance suite (rdma/rdmatest) of the
# ibverbs provider, run in the guest against rxe0 on eth0: the test binary
# $CONFORMANCE_BIN was built on the host with
#   CGO_ENABLED=1 go test -c -tags ibverbs -o <share>/ibverbs.test ./rdma/ibverbs
# and runs here with NVMEOF_IBVERBS_ADDR=$KPEER_IP NVMEOF_IBVERBS_DEVICE=rxe0,
# then, with CONFORMANCE_ADDR6 set (boot with KPEER_IPV6=1), once more over
# RoCEv2/IPv6 with NVMEOF_IBVERBS_ADDR=$CONFORMANCE_ADDR6 (added to eth0).
#
# env (defaults):
#   CONFORMANCE_BIN=/share/ibverbs.test   CONFORMANCE_RUN=TestConformance (-test.run)
#   CONFORMANCE_SKIP (-test.skip pattern, none by default)   CONFORMANCE_TIMEOUT=15m (-test.timeout)
#   CONFORMANCE_ADDR6 (e.g. 2001:db8::2; unset: no IPv6 pass)
#   NVMEOF_CONFORMANCE_LARGE (bytes of the multi-MiB transfers; the test's default if unset)
#   NVMEOF_CONFORMANCE_TIMEOUT (each wait for a completion or event; the test's default if unset)
#   Any other NVMEOF_* variable given with run.sh --env reaches the test binary: e.g.
#   NVMEOF_IBVERBS_ADDR2=192.0.2.2 opens the device a second time for the passive
#   ends (two contexts, as two processes would be).
# The test's output also goes to $KPEER_OUT/conformance.log (IPv6 pass:
# conformance-ipv6.log), as it comes.
# Exit: 0 when every pass's test binary exited 0 (every conformance test passed
# or skipped); otherwise the first failing pass's status.
set -u
LIB="${KPEER_LIB:-$(cd "$(dirname "$0")" && pwd)}"
BIN="${CONFORMANCE_BIN:-${KPEER_SHARE:-/share}/ibverbs.test}"
RUN="${CONFORMANCE_RUN:-TestConformance}"
TIMEOUT="${CONFORMANCE_TIMEOUT:-15m}"
SKIP="${CONFORMANCE_SKIP:-}"
ADDR6="${CONFORMANCE_ADDR6:-}"
NIC="${RXE_NETDEV:-${KPEER_NIC:-eth0}}"
now() { cut -d' ' -f1 /proc/uptime; }
# expand6 ADDR: the IPv6 address in full, as sysfs shows GIDs (2001:0db8:0000:...).
expand6() {
  local a=$1 head tail p out="" i n
  local -a h=() tl=() parts=()
  if [[ $a == *::* ]]; then head=${a%%::*}; tail=${a#*::}; else head=$a; tail=""; fi
  [ -n "$head" ] && IFS=: read -ra h <<< "$head"
  [ -n "$tail" ] && IFS=: read -ra tl <<< "$tail"
  n=$((8 - ${#h[@]} - ${#tl[@]}))
  parts=("${h[@]}")
  for ((i = 0; i < n; i++)); do parts+=(0); done
  parts+=("${tl[@]}")
  for p in "${parts[@]}"; do out+=$(printf '%04x:' "0x$p"); done
  echo "${out%:}"
}

if [ -n "$ADDR6" ]; then
  echo "=== IPv6 $ADDR6 on $NIC [t=$(now)s]"
  sysctl -qw "net.ipv6.conf.$NIC.disable_ipv6=0" || { echo "FAIL: IPv6 is disabled (boot with KPEER_IPV6=1)"; exit 1; }
  ip -6 addr add "$ADDR6/64" dev "$NIC" nodad || { echo "FAIL: ip -6 addr add $ADDR6/64 dev $NIC"; exit 1; }
fi

echo "=== rxe [t=$(now)s]"
# shellcheck source=/dev/null
. "$LIB/rxe-up.sh" || { echo "FAIL: rxe setup"; exit 1; }

if [ ! -x "$BIN" ]; then
  echo "FAIL: no test binary at $BIN"
  exit 1
fi
# Registered memory is pinned: no lock limit for the test.
ulimit -l unlimited 2>/dev/null || echo "note: ulimit -l unlimited failed ($(ulimit -l))"
cd /tmp || exit 1

# run_pass NAME ADDR LOG: one run of the test binary against the device at
# ADDR, its output to the share as it comes (a hung test shows where).
run_pass() {
  local name=$1 addr=$2 out=$3 rc npass nfail nskip
  echo "=== [$name] $BIN -test.v -test.run $RUN -test.skip '$SKIP' -test.timeout $TIMEOUT (NVMEOF_IBVERBS_ADDR=$addr NVMEOF_IBVERBS_DEVICE=$RXE_NAME) [t=$(now)s]"
  NVMEOF_IBVERBS_ADDR="$addr" NVMEOF_IBVERBS_DEVICE="$RXE_NAME" GOTRACEBACK=all \
    "$BIN" -test.v -test.run "$RUN" -test.skip "$SKIP" -test.timeout "$TIMEOUT" 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  echo "=== [$name] [t=$(now)s] test binary exit status $rc"
  npass=$(grep -c -E '^ *--- PASS' "$out")
  nfail=$(grep -c -E '^ *--- FAIL' "$out")
  nskip=$(grep -c -E '^ *--- SKIP' "$out")
  echo "[$name] conformance: $npass passed, $nfail failed, $nskip skipped (counts include the parent tests)"
  if [ "$rc" -ne 0 ]; then
    echo "FAIL: [$name] conformance suite exit status $rc"
    grep -E '^ *--- FAIL' "$out"
  else
    echo "PASS: [$name] conformance suite"
  fi
  return "$rc"
}

OUTDIR="${KPEER_OUT:-/tmp}"
status=0
run_pass ipv4 "$KPEER_IP" "$OUTDIR/conformance.log" || status=$?
if [ -n "$ADDR6" ]; then
  gid6=$(expand6 "$ADDR6")
  # The GID of an added address appears asynchronously.
  ok=0
  for _ in $(seq 100); do
    if grep -qix "$gid6" /sys/class/infiniband/"$RXE_NAME"/ports/1/gids/* 2>/dev/null; then ok=1; break; fi
    sleep 0.1
  done
  [ "$ok" = 1 ] || echo "note: no GID $gid6 seen in $RXE_NAME's table (the run will say more)"
  st6=0
  run_pass ipv6 "$ADDR6" "$OUTDIR/conformance-ipv6.log" || st6=$?
  [ "$status" -eq 0 ] && status=$st6
fi
rxe_counters
echo "== dmesg (rxe, last 20 lines)"
dmesg | grep -i -E 'rxe|rdma|infiniband' | tail -n 20
[ "$status" -eq 0 ] && echo "PASS: conformance suite" || echo "FAIL: conformance suite"
exit "$status"
