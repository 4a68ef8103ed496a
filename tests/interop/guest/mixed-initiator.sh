# shellcheck shell=bash
# mixed-initiator.sh - sourced by nvmetd-guest.sh (PRE_SCRIPT) for the mixed
# provider session of issue 10: before the guest's own nvmetd starts, our
# initiator in the guest (kpeer-host and the nvmeof CLI, PROVIDER=ibverbs on
# rxe0) runs against nvmetd on the soft provider on the host side
# (MIXED_TARGET, started by the test's --host-cmd). Its PASS/FAIL lines count
# in the guest's result.
#
# env: PROVIDER=ibverbs  MIXED_TARGET=$KPEER_HOST_ADDR  MIXED_ARGS (kpeer-host
#   flags describing the target: -nqn -model -serial -ns-size-mb ...)
#   NVMEOF_FLAGS ("--provider ibverbs" with PROVIDER=ibverbs)
PROVIDER="${PROVIDER:-ibverbs}"
if [ "$PROVIDER" = ibverbs ]; then NVMEOF_FLAGS="${NVMEOF_FLAGS---provider ibverbs}"; else NVMEOF_FLAGS="${NVMEOF_FLAGS:-}"; fi
MIXED_TARGET="${MIXED_TARGET:-${KPEER_HOST_ADDR:-192.0.2.1}}"
step "our initiator ($PROVIDER) in the guest against nvmetd (soft) on $MIXED_TARGET"
# shellcheck disable=SC2086
kpeer-host -provider "$PROVIDER" -traddr "$MIXED_TARGET" -host-addr "${KPEER_IP:-192.0.2.2}" \
  -cli /usr/local/bin/nvmeof -cli-flags "$NVMEOF_FLAGS" ${MIXED_ARGS:-} > "$OUT/kpeer-host-mixed.log" 2>&1
mixed_rc=$?
cat "$OUT/kpeer-host-mixed.log"
NFAIL=$((NFAIL + $(grep -c '^FAIL:' "$OUT/kpeer-host-mixed.log")))
if [ "$mixed_rc" != 0 ] && ! grep -q '^FAIL:' "$OUT/kpeer-host-mixed.log"; then
  failc "kpeer-host against $MIXED_TARGET: exit status $mixed_rc without a FAIL line"
fi
grep -q '^RESULT: PASS' "$OUT/kpeer-host-mixed.log" &&
  pass "guest initiator ($PROVIDER) against nvmetd (soft) on $MIXED_TARGET: every check passed"
