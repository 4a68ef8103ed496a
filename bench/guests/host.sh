#!/bin/bash
# host.sh - guest b of scripts/bench-guests.sh: the kernel's nvme-rdma or
# nvme-tcp host (BENCH_TRTYPE) runs the same fio jobs against each target
# guest a offers in turn
# (bench-ready-T ... bench-done-T), JSON results in
# $KPEER_OUT/fio-T-JOB.json.
#
# Jobs (direct I/O, libaio, on the whole namespace, time based):
#   rr4k-qd32  4 KiB random read, iodepth 32
#   rr4k-qd1   4 KiB random read, iodepth 1
#   sr128k     128 KiB sequential read, iodepth 8
#
# env: BENCH_NQN  BENCH_TARGETS="kernel nvmetd"  BENCH_RUNTIME_S=30
#   BENCH_RAMP_S=5  BENCH_JOBS="rr4k-qd32 rr4k-qd1 sr128k"  BENCH_WAIT_S=1800
set -u
# shellcheck source=/dev/null
. "${INTEROP:-/share/interop}/guest/lib.sh"
NQN="${BENCH_NQN:?}"
TARGETS="${BENCH_TARGETS:-kernel nvmetd}"
RUNTIME="${BENCH_RUNTIME_S:-30}"
RAMP="${BENCH_RAMP_S:-5}"
JOBS="${BENCH_JOBS:-rr4k-qd32 rr4k-qd1 sr128k}"
TRTYPE="${BENCH_TRTYPE:-rdma}"
WAIT_S="${BENCH_WAIT_S:-1800}"
TARGET_ADDR="${KPEER_PEER_ADDR:-192.0.2.2}"
CUR=""
finish() {
  [ -n "$CUR" ] && { nvme disconnect -n "$NQN" >/dev/null 2>&1; put_signal "bench-done-$CUR"; }
  if [ "$NFAIL" = 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL ($NFAIL failed checks)"; fi
  [ "$NFAIL" = 0 ]
  exit $?
}
trap finish EXIT

if [ "$TRTYPE" = rdma ]; then rxe; fi
modprobe "nvme_$TRTYPE" || abort "modprobe nvme_$TRTYPE"
echo "$(nproc) CPUs; fio $(fio --version); kernel $(uname -r)"

declare -A job=(
  [rr4k-qd32]="--rw=randread --bs=4k --iodepth=32"
  [rr4k-qd1]="--rw=randread --bs=4k --iodepth=1"
  [sr128k]="--rw=read --bs=128k --iodepth=8"
)

for t in $TARGETS; do
  step "target $t: waiting for bench-ready-$t"
  wait_signal "bench-ready-$t" "$WAIT_S" || abort "target $t not ready"
  CUR=$t
  run nvme connect -t "$TRTYPE" -a "$TARGET_ADDR" -s 4420 -n "$NQN" || abort "connect to $t"
  dev=""
  for _ in $(seq 100); do
    for b in /sys/block/nvme*n*; do
      [ "$(cat "$b/device/subsysnqn" 2>/dev/null)" = "$NQN" ] && dev=/dev/$(basename "$b")
    done
    [ -n "$dev" ] && [ -b "$dev" ] && break
    sleep 0.1
  done
  [ -b "$dev" ] || abort "no namespace of $t"
  echo "$t: $dev, $(blockdev --getsize64 "$dev") bytes, max_hw_sectors_kb $(cat "/sys/block/$(basename "$dev")/queue/max_hw_sectors_kb")"
  for j in $JOBS; do
    [ -n "${job[$j]:-}" ] || abort "unknown job $j"
    step "$t: fio $j (${job[$j]}) ${RUNTIME}s"
    # shellcheck disable=SC2086
    if fio --name="$j" --filename="$dev" --direct=1 --ioengine=libaio ${job[$j]} \
         --time_based --runtime="$RUNTIME" --ramp_time="$RAMP" --norandommap --randrepeat=0 \
         --output-format=json --output="$OUT/fio-$t-$j.json"; then
      grep -E '"iops"|"50.000000"' "$OUT/fio-$t-$j.json" | head -n 3
      pass "$t $j"
    else
      failc "$t $j: fio failed"; cat "$OUT/fio-$t-$j.json"
    fi
  done
  run nvme disconnect -n "$NQN" || failc "disconnect from $t"
  CUR=""
  put_signal "bench-done-$t"
done
exit 0
