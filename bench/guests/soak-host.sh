#!/bin/bash
# soak-host.sh - guest b of scripts/soak-guests.sh: the kernel's nvme-rdma
# host connects to nvmetd in guest a (tests/interop/guest/nvmetd-guest.sh)
# and runs fio write+verify rounds (crc32c, verify_fatal off so every bad
# block is counted) for SOAK_S seconds, alternating
#   random writes of 4 KiB..128 KiB at iodepth 16, and
#   sequential 1 MiB writes at iodepth 4 (split at nvmetd's MDTS),
# each over SOAK_MB MiB of its own region, then verified.
# Prints "SOAK: rounds N, MiB written W, verify errors E, fio failures F"
# and touches $SIGNAL/release at the end.
#
# env: SOAK_NQN  SOAK_S=600  SOAK_MB=16  SOAK_NS_MB=128  WAIT_READY_S=300
set -u
# shellcheck source=/dev/null
. "${INTEROP:-/share/interop}/guest/lib.sh"
NQN="${SOAK_NQN:?}"
SOAK_S="${SOAK_S:-600}"
SOAK_MB="${SOAK_MB:-16}"
NS_MB="${SOAK_NS_MB:-128}"
WAIT_READY_S="${WAIT_READY_S:-300}"
TARGET_ADDR="${KPEER_PEER_ADDR:-192.0.2.2}"
CONNECTED=0
finish() {
  [ "$CONNECTED" = 1 ] && nvme disconnect -n "$NQN"
  touch "$SIGNAL/release"
  if [ "$NFAIL" = 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL ($NFAIL failed checks)"; fi
  [ "$NFAIL" = 0 ]
  exit $?
}
trap finish EXIT

rxe
modprobe nvme_rdma || abort "modprobe nvme_rdma"
wait_signal target-ready "$WAIT_READY_S" || abort "nvmetd not ready"
run nvme connect -t rdma -a "$TARGET_ADDR" -s 4420 -n "$NQN" || abort "connect"
CONNECTED=1
dev=""
for _ in $(seq 100); do
  for b in /sys/block/nvme*n*; do
    [ "$(cat "$b/device/subsysnqn" 2>/dev/null)" = "$NQN" ] && dev=/dev/$(basename "$b")
  done
  [ -n "$dev" ] && [ -b "$dev" ] && break
  sleep 0.1
done
[ -b "$dev" ] || abort "no namespace"
echo "$dev: $(blockdev --getsize64 "$dev") bytes"

regions=$((NS_MB / SOAK_MB))
end=$(( $(date +%s) + SOAK_S ))
rounds=0 written=0 errors=0 failures=0
step "soak: fio write+verify rounds for ${SOAK_S}s"
while [ "$(date +%s)" -lt "$end" ]; do
  [ -e "$SIGNAL/abort" ] && abort "aborted: $(cat "$SIGNAL/abort")"
  if [ $((rounds % 2)) = 0 ]; then
    pat="--rw=randwrite --bsrange=4k-128k --iodepth=16"
  else
    pat="--rw=write --bs=1M --iodepth=4"
  fi
  off=$(( (rounds % regions) * SOAK_MB ))
  # shellcheck disable=SC2086
  fio --name="soak-$rounds" --filename="$dev" --direct=1 --ioengine=libaio $pat \
    --offset="${off}M" --size="${SOAK_MB}M" --verify=crc32c --do_verify=1 --verify_fatal=0 \
    --verify_dump=0 --randrepeat=0 > "/tmp/soak-$rounds.out" 2>&1
  rc=$?
  e=$(grep -ciE 'verify: bad|bad magic|crc32c: verify failed|verify failed' "/tmp/soak-$rounds.out")
  errors=$((errors + e))
  if [ "$rc" != 0 ] || [ "$e" != 0 ]; then
    failures=$((failures + 1))
    echo "round $rounds ($pat at ${off}M): fio exit $rc, $e verify errors"
    tail -n 20 "/tmp/soak-$rounds.out"
  fi
  rounds=$((rounds + 1))
  written=$((written + SOAK_MB))
  [ $((rounds % 10)) = 0 ] && echo "t=$(ts)s: $rounds rounds, $written MiB written and verified, $errors verify errors"
done
echo "SOAK: rounds $rounds, MiB written $written, verify errors $errors, fio failures $failures"
[ "$errors" = 0 ] && [ "$failures" = 0 ] && [ "$rounds" -gt 0 ] &&
  pass "soak: $rounds rounds, $written MiB written and verified, no verify error" ||
  failc "soak: $errors verify errors, $failures failed rounds of $rounds"
dmesg | grep -iE 'nvme|rdma' | tail -n 20
exit 0
