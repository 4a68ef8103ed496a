#!/bin/bash
# target.sh - guest a of scripts/bench-guests.sh: the two targets, one after
# the other, on 192.0.2.2:4420 over BENCH_TRTYPE (rdma or tcp) with the same
# null backing (no data kept, BENCH_SIZE_MB MiB, 512-byte blocks):
#   1. kernel: nvmet + nvmet-rdma or nvmet-tcp with a null_blk device
#      (memory_backed=0)
#   2. nvmetd: our nvmetd (NVMETD_CONFIG: the ibverbs provider on rxe0, or
#      a tcp port) with backend "null"
# For each target T: $SIGNAL/bench-ready-T, then wait for bench-done-T from
# the host guest, tear down. nvmetd's CPU time and RSS are recorded in
# $KPEER_OUT/nvmetd-usage.txt.
#
# env: BENCH_NQN  BENCH_SIZE_MB=1024  NVMETD_CONFIG (guest path)
#   BENCH_PROVIDER=ibverbs (soft: a stand-in; rdma_rxe is unloaded before
#   nvmetd starts, as the soft provider needs UDP 4791)
#   BENCH_TARGETS="kernel nvmetd"  BENCH_WAIT_S=1800
#   BENCH_NVMETD_ARGS=""  extra nvmetd flags (e.g. --poll)
set -u
# shellcheck source=/dev/null
. "${INTEROP:-/share/interop}/guest/lib.sh"
NQN="${BENCH_NQN:?}"
SIZE_MB="${BENCH_SIZE_MB:-1024}"
PROVIDER="${BENCH_PROVIDER:-ibverbs}"
TRTYPE="${BENCH_TRTYPE:-rdma}"
TARGETS="${BENCH_TARGETS:-kernel nvmetd}"
WAIT_S="${BENCH_WAIT_S:-1800}"
ADDR="${KPEER_IP:-192.0.2.2}"
CFG=/sys/kernel/config/nvmet
finish() {
  touch "$SIGNAL/bench-target-finished"
  if [ "$NFAIL" = 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL ($NFAIL failed checks)"; fi
  [ "$NFAIL" = 0 ]
  exit $?
}
trap finish EXIT

install_bins
if [ "$TRTYPE" = rdma ]; then rxe; fi
echo "$(nproc) CPUs, $(awk '/MemTotal/ {print $2/1024 " MiB"}' /proc/meminfo), kernel $(uname -r)"

kernel_target() {
  step "kernel target: nvmet-$TRTYPE, null_blk ${SIZE_MB} MiB"
  modprobe nvmet && modprobe "nvmet_$TRTYPE" || abort "modprobe nvmet nvmet_$TRTYPE"
  modprobe null_blk nr_devices=0 || abort "modprobe null_blk"
  local nb=/sys/kernel/config/nullb/nullb0 s=$CFG/subsystems/$NQN p=$CFG/ports/1
  mkdir -p "$nb" && echo "$SIZE_MB" > "$nb/size" && echo 512 > "$nb/blocksize" &&
    echo 0 > "$nb/memory_backed" && echo 1 > "$nb/power" || abort "null_blk"
  for _ in $(seq 50); do [ -b /dev/nullb0 ] && break; sleep 0.1; done
  mkdir "$s" && echo 1 > "$s/attr_allow_any_host" && mkdir "$s/namespaces/1" &&
    echo -n /dev/nullb0 > "$s/namespaces/1/device_path" && echo 1 > "$s/namespaces/1/enable" || abort "nvmet subsystem"
  mkdir "$p" && echo "$TRTYPE" > "$p/addr_trtype" && echo ipv4 > "$p/addr_adrfam" &&
    echo "$ADDR" > "$p/addr_traddr" && echo 4420 > "$p/addr_trsvcid" &&
    ln -s "$s" "$p/subsystems/$NQN" || abort "nvmet port"
  put_signal bench-ready-kernel
  wait_signal bench-done-kernel "$WAIT_S" || abort "no bench-done-kernel"
  step "kernel target: teardown"
  rm -f "$p/subsystems/$NQN"; rmdir "$p"
  echo 0 > "$s/namespaces/1/enable"; rmdir "$s/namespaces/1" "$s"
  echo 0 > "$nb/power"; rmdir "$nb"
  pass "kernel target served and torn down"
}

nvmetd_target() {
  step "nvmetd ($TRTYPE): null ${SIZE_MB} MiB"
  if [ "$TRTYPE" = rdma ] && [ "$PROVIDER" = soft ]; then
    rdma link delete rxe0; modprobe -r rdma_rxe || abort "cannot unload rdma_rxe for the soft provider"
  fi
  cat "$NVMETD_CONFIG"
  # shellcheck disable=SC2086
  nvmetd --config "$NVMETD_CONFIG" ${BENCH_NVMETD_ARGS:-} > "$OUT/nvmetd.log" 2>&1 &
  local pid=$! ok=0
  for _ in $(seq 300); do grep -q '\blistening\b' "$OUT/nvmetd.log" && { ok=1; break; }; kill -0 "$pid" || break; sleep 0.2; done
  [ "$ok" = 1 ] || { tail -n 30 "$OUT/nvmetd.log"; abort "nvmetd did not start"; }
  head -n 10 "$OUT/nvmetd.log"
  put_signal bench-ready-nvmetd
  wait_signal bench-done-nvmetd "$WAIT_S" || { kill "$pid"; abort "no bench-done-nvmetd"; }
  # utime stime (clock ticks), RSS and threads, and the context switches of
  # all its threads at the end of the runs
  echo "ticks_per_s $(getconf CLK_TCK) utime $(awk '{print $14}' "/proc/$pid/stat") stime $(awk '{print $15}' "/proc/$pid/stat") rss_threads $(proc_sample "$pid")" \
    "ctxt_voluntary $(cat /proc/"$pid"/task/*/status | awk '/^voluntary_ctxt_switches/ { s += $2 } END { print s }')" \
    "ctxt_nonvoluntary $(cat /proc/"$pid"/task/*/status | awk '/^nonvoluntary_ctxt_switches/ { s += $2 } END { print s }')" \
    | tee "$OUT/nvmetd-usage.txt"
  kill -TERM "$pid"; wait "$pid"; local rc=$?
  [ "$rc" = 0 ] && pass "nvmetd served and stopped (status 0)" || failc "nvmetd exit status $rc"
}

for t in $TARGETS; do
  case "$t" in
    kernel) kernel_target ;;
    nvmetd) nvmetd_target ;;
    *) abort "unknown target $t" ;;
  esac
done
exit 0
