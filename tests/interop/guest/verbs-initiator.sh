#!/bin/bash
# verbs-initiator.sh - our initiator inside a guest against the kernel's
# nvmet-rdma in the other guest (guest/initiator-target.sh), issue 10: with
# PROVIDER=ibverbs our binaries (built with cgo and -tags ibverbs) use the
# guest's rxe0 through libibverbs/librdmacm.
#
#   1. kpeer-host (tests/interop/cmd/kpeer-host): discovery, connect,
#      Identify, SMART, the target guest's pattern, verified writes and reads
#      of 4 KiB .. 4 MiB+512 split at the kernel's MDTS (1 MiB), Flush, the
#      refusals, and the nvmeof CLI (discover, failing connects, connect /
#      list / disconnect);
#   2. kpeer-host -steps session -max-transfer $SMALL_XFER: the same I/O split
#      at our own transfer limit, below MDTS;
#   3. guest/nbd-host.sh: nvmeof connect --map nbd, mkfs.ext4, mount, copy,
#      sha256 after a remount, umount, fsck, disconnect, nothing left;
#   4. no RC QP of ours left on rxe0.
#
# env (defaults):
#   PROVIDER=ibverbs (ibverbs | soft; soft leaves rdma_rxe unloaded, as it must)
#   NVMEOF_FLAGS="--provider ibverbs" (with PROVIDER=soft: "")
#   TARGET_ADDR=$KPEER_PEER_ADDR  NQN  PATTERN_MB=2  FILE_MB=8  SMALL_XFER=131072
#   FAULT_TIMEOUT=15s  WAIT_READY_S=600
# Prints PASS:/FAIL: lines and finally "RESULT: PASS|FAIL"; creates
# $KPEER_SIGNAL/release at the end (the target guest then tears down).
set -u
# shellcheck source=/dev/null
. "${INTEROP:-/share/interop}/guest/lib.sh"
PROVIDER="${PROVIDER:-ibverbs}"
if [ "$PROVIDER" = ibverbs ]; then NVMEOF_FLAGS="${NVMEOF_FLAGS---provider ibverbs}"; else NVMEOF_FLAGS="${NVMEOF_FLAGS:-}"; fi
TARGET_ADDR="${TARGET_ADDR:-${KPEER_PEER_ADDR:-192.0.2.3}}"
NQN="${NQN:-nqn.2014-08.org.nvmexpress:kpeer-target}"
PATTERN_MB="${PATTERN_MB:-2}"
SMALL_XFER="${SMALL_XFER:-131072}"
FAULT_TIMEOUT="${FAULT_TIMEOUT:-15s}"
WAIT_READY_S="${WAIT_READY_S:-600}"
MYADDR="${KPEER_IP:-192.0.2.2}"

finish() {
  touch "$SIGNAL/release"
  if [ "$NFAIL" = 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL ($NFAIL failed checks)"; fi
  [ "$NFAIL" = 0 ]
  exit $?
}
trap finish EXIT

install_bins
if [ "$PROVIDER" = ibverbs ]; then
  rxe
elif lsmod | grep -q '^rdma_rxe'; then
  # an earlier part of the boot (guest/seq.sh) brought rxe up: the soft
  # provider needs UDP 4791, which rdma_rxe holds
  step "rdma_rxe out of the way of the soft provider"
  rdma link delete rxe0; modprobe -r rdma_rxe || abort "cannot unload rdma_rxe"
fi
step "waiting for the kernel target ($SIGNAL/target-ready)"
wait_signal target-ready "$WAIT_READY_S" || abort "target not ready"
cat "$SIGNAL/target-ready"

# kpeer_host NAME ARGS...: run kpeer-host, its output into the log; its
# PASS/FAIL lines count as ours.
kpeer_host() {
  local name=$1 rc; shift
  step "kpeer-host ($name): -provider $PROVIDER $*"
  kpeer-host -provider "$PROVIDER" -traddr "$TARGET_ADDR" -host-addr "$MYADDR" -nqn "$NQN" \
    -pattern-mb "$PATTERN_MB" -fault-timeout "$FAULT_TIMEOUT" "$@" > "$OUT/kpeer-host-$name.log" 2>&1
  rc=$?
  cat "$OUT/kpeer-host-$name.log"
  NFAIL=$((NFAIL + $(grep -c '^FAIL:' "$OUT/kpeer-host-$name.log")))
  if [ "$rc" != 0 ] && ! grep -q '^FAIL:' "$OUT/kpeer-host-$name.log"; then
    failc "kpeer-host ($name) exit status $rc without a FAIL line"
  fi
}
kpeer_host mdts -cli /usr/local/bin/nvmeof -cli-flags "$NVMEOF_FLAGS"
kpeer_host small-xfer -steps session -max-transfer "$SMALL_XFER"

step "nvmeof through the guest's NBD (guest/nbd-host.sh)"
# nbd-host.sh touches $SIGNAL/release at its end; the target guest then
# checks for QPs we left and tears down.
NVMEOF=/share/bin/nvmeof NVMEOF_FLAGS="$NVMEOF_FLAGS" CHECK_RXE=0 \
  CHECK_UDP=$([ "$PROVIDER" = soft ] && echo 1 || echo 0) TARGET_ADDR="$TARGET_ADDR" NQN="$NQN" \
  bash "$INTEROP/guest/nbd-host.sh" > "$OUT/nbd-host.log" 2>&1
rc=$?
cat "$OUT/nbd-host.log"
NFAIL=$((NFAIL + $(grep -c '^FAIL:' "$OUT/nbd-host.log")))
[ "$rc" != 0 ] && ! grep -q '^FAIL:' "$OUT/nbd-host.log" && failc "nbd-host.sh exit status $rc without a FAIL line"

if [ "$PROVIDER" = ibverbs ]; then
  step "RC QPs of ours left on rxe0"
  n=0
  for _ in $(seq 50); do
    n=$(rdma resource show qp 2>/dev/null | grep 'type RC' | grep -cE 'comm (nvmeof|kpeer-host)')
    [ "$n" = 0 ] && break
    sleep 0.2
  done
  rdma resource show qp
  [ "$n" = 0 ] && pass "no RC QP of nvmeof or kpeer-host left on rxe0" || failc "$n RC QPs of ours left on rxe0"
fi
exit 0
