#!/bin/bash
# nvmetd-guest.sh - nvmetd inside a guest (issue 10: nvmetd on ibverbs over the
# guest's rxe0), as the target for the other guest's kernel host or for a
# program on the host side.
#
#   rxe0 up (NVMETD_RXE=1; 0 for the soft provider, which cannot share UDP 4791
#   with rdma_rxe); nvmetd started under tests/interop/host/nvmetd-restart.sh,
#   so the peer can ask for restarts ($SIGNAL/restart-target holding KILL or
#   TERM -> $SIGNAL/target-restarted-<n>, see nvmetd-full.sh's restart step);
#   $SIGNAL/target-ready once it listens on TARGET_ADDR:TRSVCID; optional
#   resource samples; at $SIGNAL/release: no RC QP of nvmetd may be left,
#   SIGTERM must stop it with status 0; backing files hashed and/or copied
#   into $KPEER_OUT for the test to compare.
#
# env (defaults):
#   NVMETD=/share/bin/nvmetd  NVMETD_CONFIG=/share/cfg/nvmetd.hcl (required)
#   NVMETD_RXE=1  TARGET_ADDR=$KPEER_IP  TRSVCID=4420
#   PRE_SCRIPT=""    a script (path) sourced after rxe is up and before nvmetd
#                    starts (e.g. the guest's own initiator checks)
#   HASH_FILES=""    files whose "sha256 size" go to $KPEER_OUT/<name>.sha256
#   COPY_FILES=""    PATH:MIB entries: the first MIB MiB go to $KPEER_OUT/<name>
#   SAMPLE_S=0       every SAMPLE_S s: "uptime rss_kib threads pid" of nvmetd
#                    into $KPEER_OUT/nvmetd-samples.txt (0: off)
#   READY_WAIT_S=120 TARGET_WAIT_S=1800 STALE_WAIT_S=15
# Log of nvmetd and the wrapper: $KPEER_OUT/nvmetd.log.
# Prints PASS:/FAIL: lines and "RESULT: PASS|FAIL".
set -u
# shellcheck source=/dev/null
. "${INTEROP:-/share/interop}/guest/lib.sh"
NVMETD_SRC="${NVMETD:-/share/bin/nvmetd}"
NVMETD_CONFIG="${NVMETD_CONFIG:?NVMETD_CONFIG not set}"
NVMETD_RXE="${NVMETD_RXE:-1}"
TARGET_ADDR="${TARGET_ADDR:-${KPEER_IP:-192.0.2.2}}"
TRSVCID="${TRSVCID:-4420}"
PRE_SCRIPT="${PRE_SCRIPT:-}"
HASH_FILES="${HASH_FILES:-}"
COPY_FILES="${COPY_FILES:-}"
SAMPLE_S="${SAMPLE_S:-0}"
READY_WAIT_S="${READY_WAIT_S:-120}"
TARGET_WAIT_S="${TARGET_WAIT_S:-1800}"
STALE_WAIT_S="${STALE_WAIT_S:-15}"
WRAPPER_PID=""
SAMPLER_PID=""
LOG="$OUT/nvmetd.log"

stop_nvmetd() {
  [ -n "$WRAPPER_PID" ] || return 0
  kill -TERM "$WRAPPER_PID" 2>/dev/null
  for _ in $(seq 200); do kill -0 "$WRAPPER_PID" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$WRAPPER_PID" 2>/dev/null; then
    p=$(nvmetd_pid) && kill -KILL "$p"
    kill -KILL "$WRAPPER_PID"
  fi
  wait "$WRAPPER_PID" 2>/dev/null
  WRAPPER_PID=""
}
finish() {
  [ -n "$SAMPLER_PID" ] && kill "$SAMPLER_PID" 2>/dev/null
  stop_nvmetd
  touch "$SIGNAL/release"
  if [ "$NFAIL" = 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL ($NFAIL failed checks)"; fi
  [ "$NFAIL" = 0 ]
  exit $?
}
trap finish EXIT

# nvmetd_pid: the running nvmetd (the newest, after restarts).
nvmetd_pid() { pgrep -n -x nvmetd; }
# rc_qps: RC QPs of nvmetd's processes on the guest's RDMA devices.
rc_qps() { rdma resource show qp 2>/dev/null | grep 'type RC' | grep -c 'comm nvmetd'; }
# listening: nvmetd logged its listener (server.go: "listening").
listening() { grep -q '\blistening\b' "$LOG" 2>/dev/null; }

install_bins
[ -x "/usr/local/bin/$(basename "$NVMETD_SRC")" ] || abort "no nvmetd at $NVMETD_SRC"
NVMETD_BIN="/usr/local/bin/$(basename "$NVMETD_SRC")"
if [ "$(basename "$NVMETD_BIN")" != nvmetd ]; then
  ln -sf "$NVMETD_BIN" /usr/local/bin/nvmetd
  NVMETD_BIN=/usr/local/bin/nvmetd
fi
[ "$NVMETD_RXE" = 1 ] && rxe
if [ -n "$PRE_SCRIPT" ]; then
  step "pre-script $PRE_SCRIPT"
  # shellcheck source=/dev/null
  . "$PRE_SCRIPT"
fi

step "nvmetd --check $NVMETD_CONFIG"
cat "$NVMETD_CONFIG"
run "$NVMETD_BIN" --config "$NVMETD_CONFIG" --check || abort "nvmetd --check"

step "nvmetd on $TARGET_ADDR:$TRSVCID"
bash "$INTEROP/host/nvmetd-restart.sh" "$NVMETD_BIN" "$NVMETD_CONFIG" > "$LOG" 2>&1 &
WRAPPER_PID=$!
ok=0
end=$(( $(date +%s) + READY_WAIT_S ))
while [ "$(date +%s)" -lt "$end" ]; do
  listening && { ok=1; break; }
  kill -0 "$WRAPPER_PID" 2>/dev/null || break
  sleep 0.2
done
if [ "$ok" != 1 ]; then
  tail -n 40 "$LOG"
  abort "nvmetd not listening on $TARGET_ADDR:$TRSVCID within $READY_WAIT_S s"
fi
[ "$NVMETD_RXE" = 1 ] && rdma resource show cm_id
grep -iE 'device|gid|mtu|link' "$LOG" | head -n 5
pass "nvmetd listening on $TARGET_ADDR:$TRSVCID (pid $(nvmetd_pid)) [t=$(ts)s]"
put_signal target-ready "NVMETD_PID=$(nvmetd_pid) TARGET_ADDR=$TARGET_ADDR TRSVCID=$TRSVCID"

if [ "$SAMPLE_S" -gt 0 ]; then
  (while :; do
     p=$(nvmetd_pid) && echo "$(ts) $(proc_sample "$p") $p" >> "$OUT/nvmetd-samples.txt"
     sleep "$SAMPLE_S"
   done) &
  SAMPLER_PID=$!
fi

step "waiting for $SIGNAL/release (up to $TARGET_WAIT_S s)"
maxqp=0
end=$(( $(date +%s) + TARGET_WAIT_S ))
while [ ! -e "$SIGNAL/release" ]; do
  [ -e "$SIGNAL/abort" ] && abort "aborted: $(cat "$SIGNAL/abort")"
  [ "$(date +%s)" -ge "$end" ] && abort "timeout waiting for release"
  kill -0 "$WRAPPER_PID" 2>/dev/null || { tail -n 40 "$LOG"; abort "nvmetd (wrapper) exited by itself"; }
  n=$(rc_qps)
  [ "$n" -gt "$maxqp" ] && { maxqp=$n; echo "RC QPs of nvmetd: $n [t=$(ts)s]"; }
  sleep 1
done
echo "released [t=$(ts)s]; most RC QPs of nvmetd seen: $maxqp"
[ -n "$SAMPLER_PID" ] && { kill "$SAMPLER_PID" 2>/dev/null; SAMPLER_PID=""; }

if [ "$NVMETD_RXE" = 1 ]; then
  step "QPs left by the hosts"
  n=0
  for _ in $(seq $((STALE_WAIT_S * 5))); do n=$(rc_qps); [ "$n" = 0 ] && break; sleep 0.2; done
  rdma resource show qp | grep -v 'type GSI' || true
  if [ "$n" = 0 ]; then pass "no RC QP of nvmetd left after the hosts disconnected"; else failc "$n RC QPs of nvmetd left ${STALE_WAIT_S}s after release"; fi
fi

step "stop nvmetd (SIGTERM)"
stop_nvmetd
tail -n 5 "$LOG"
if grep -q 'final stop: nvmetd exit status 0 ' "$LOG"; then
  pass "nvmetd stopped by SIGTERM with status 0"
else
  failc "nvmetd did not stop cleanly: $(grep 'final stop' "$LOG" || echo 'no final stop')"
fi
if grep -qE 'panic:|fatal error:|DATA RACE' "$LOG"; then
  grep -nE -A20 'panic:|fatal error:|DATA RACE' "$LOG" | head -n 60
  failc "nvmetd log has a panic, fatal error or race"
fi

for f in $HASH_FILES; do
  echo "$(sha256sum < "$f" | cut -d' ' -f1) $(stat -c %s "$f")" > "$OUT/$(basename "$f").sha256"
  echo "sha256 $f: $(cat "$OUT/$(basename "$f").sha256")"
done
for e in $COPY_FILES; do
  f=${e%%:*} mb=${e#*:}
  dd if="$f" of="$OUT/$(basename "$f")" bs=1M count="$mb" status=none || failc "copy $f"
done
exit 0
