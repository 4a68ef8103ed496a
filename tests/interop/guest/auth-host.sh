#!/bin/bash
# auth-host.sh - the Linux kernel's nvme-rdma or nvme-tcp host (6.12:
# in-band authentication) against nvmetd on $TARGET_ADDR with DH-HMAC-CHAP.
#
# Cases, in this order (the refused ones last: a kernel host with a wrong key
# may sit in the kernel for minutes before it gives up):
#   uni      HOST1 with its key: verified I/O (pattern at 0, read back)
#   bidi     HOST2 with its key and the controller key: verified I/O (pattern
#            at 1 MiB), also over the I/O queues (each queue authenticates)
#   missing  HOST3, whose entry requires a key, connects without one: refused
#   ctrlkey  HOST2 with a wrong controller key: refused
#   wrong    HOST1 with a wrong key: refused
#
# env: TARGET_ADDR (default $KPEER_PEER_ADDR) TRSVCID=4420 TRTYPE=rdma (or tcp)
#   NQN (required);
#   HOST1_NQN HOST1_KEY; HOST2_NQN HOST2_KEY HOST2_CTRL_KEY; HOST3_NQN;
#   WRONG_KEY WRONG_CTRL_KEY; CASES (default "uni bidi missing ctrlkey wrong");
#   REFUSE_WAIT_S=400 (bound on a refused connect); PATTERN_MB=1.
# Prints PASS:/FAIL: lines, "INFO: CASE took N s" and "RESULT: PASS|FAIL".
set -u
TARGET_ADDR="${TARGET_ADDR:-${KPEER_PEER_ADDR:-192.0.2.1}}"
TRSVCID="${TRSVCID:-4420}"
TRTYPE="${TRTYPE:-rdma}"
NQN="${NQN:?}"
CASES="${CASES:-uni bidi missing ctrlkey wrong}"
REFUSE_WAIT_S="${REFUSE_WAIT_S:-400}"
PATTERN_MB="${PATTERN_MB:-1}"
NFAIL=0

ts() { cut -d' ' -f1 /proc/uptime; }
step() { echo; echo "=== $* [t=$(ts)s]"; }
pass() { echo "PASS: $*"; }
failc() { echo "FAIL: $*"; NFAIL=$((NFAIL + 1)); }
finish() {
  nvme disconnect -n "$NQN" >/dev/null 2>&1
  if [ "$NFAIL" = 0 ]; then echo "RESULT: PASS"; exit 0; fi
  echo "RESULT: FAIL ($NFAIL)"; exit 1
}

step "modules (nvme-$TRTYPE)"
modprobe "nvme-$TRTYPE" || { failc "modprobe nvme-$TRTYPE"; finish; }
modprobe nvme-auth 2>/dev/null
if [ "$TRTYPE" = rdma ]; then
  # shellcheck source=/dev/null
  . "${KPEER_LIB:-/share/.kpeer/lib}/rxe-up.sh" || { failc "rxe"; finish; }
fi
uname -r
nvme version

# hostid_of NQN: a host ID derived from the NQN (nvme-cli needs one per host).
hostid_of() { printf '%s' "$1" | sha256sum | sed -E 's/^(.{8})(.{4})(.{4})(.{4})(.{12}).*/\1-\2-\3-\4-\5/'; }

# connect HOSTNQN [nvme connect options]: connect, bounded by REFUSE_WAIT_S.
connect() {
  local h=$1; shift
  timeout "$REFUSE_WAIT_S" nvme connect -t "$TRTYPE" -a "$TARGET_ADDR" -s "$TRSVCID" -n "$NQN" \
    --hostnqn="$h" --hostid="$(hostid_of "$h")" "$@" 2>&1
}

# nsdev: the namespace block device of $NQN (waits up to 20 s).
nsdev() {
  local b
  for _ in $(seq 100); do
    for b in /sys/block/nvme*n*; do
      [ -e "$b" ] || continue
      if [ "$(cat "$b/device/subsysnqn" 2>/dev/null)" = "$NQN" ] && [ -b "/dev/$(basename "$b")" ]; then
        basename "$b"; return 0
      fi
    done
    sleep 0.2
  done
  return 1
}

# verified_io TAG OFFSET_MB: write a tagged pattern with direct I/O, read it
# back and compare; the host side checks the backing file afterwards.
verified_io() {
  local tag=$1 off=$2 dev
  dev=$(nsdev) || { failc "$tag: no namespace block device"; return; }
  for i in $(seq 0 $((PATTERN_MB * 2048 - 1))); do printf "auth-%-5s blk %08d %0487d\n" "$tag" "$i" "$i"; done > "/tmp/$tag.bin"
  if dd if="/tmp/$tag.bin" of="/dev/$dev" bs=64k seek=$((off * 16)) oflag=direct conv=fsync status=none &&
     dd if="/dev/$dev" of="/tmp/$tag.back" bs=64k skip=$((off * 16)) count=$((PATTERN_MB * 16)) iflag=direct status=none &&
     cmp -s "/tmp/$tag.bin" "/tmp/$tag.back"; then
    pass "$tag: verified I/O on /dev/$dev ($PATTERN_MB MiB at $off MiB, $(sha256sum < "/tmp/$tag.bin" | cut -c1-16))"
  else
    failc "$tag: I/O on /dev/$dev"
  fi
  # the kernel authenticated every queue: the admin queue and the I/O queues
  local c
  for c in /sys/class/nvme/nvme*; do
    [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$NQN" ] || continue
    echo "controller $(basename "$c"): queue_count $(cat "$c/queue_count" 2>/dev/null) state $(cat "$c/state")"
    [ -e "$c/dhchap_secret" ] && echo "  dhchap_secret set: $( [ -s "$c/dhchap_secret" ] && echo yes)"
  done
}

# refused CASE HOSTNQN [options]: the connect must fail.
refused() {
  local c=$1 h=$2 t0 out rc; shift 2
  t0=$(date +%s)
  out=$(connect "$h" "$@"); rc=$?
  echo "$out"
  echo "INFO: $c took $(( $(date +%s) - t0 )) s"
  if [ "$rc" = 0 ] && nsdev >/dev/null 2>&1; then
    failc "$c: connect succeeded"
    nvme disconnect -n "$NQN"
  elif [ "$rc" = 124 ]; then
    failc "$c: connect still pending after $REFUSE_WAIT_S s"
  else
    pass "$c: refused (status $rc)"
  fi
  nvme disconnect -n "$NQN" >/dev/null 2>&1
}

for c in $CASES; do
  step "case $c"
  t0=$(date +%s)
  case $c in
    uni)
      if connect "$HOST1_NQN" --dhchap-secret="$HOST1_KEY"; then
        pass "uni: connected with --dhchap-secret"
        verified_io uni 0
      else
        failc "uni: connect"
      fi
      echo "INFO: $c took $(( $(date +%s) - t0 )) s"
      nvme disconnect -n "$NQN" || failc "uni: disconnect"
      ;;
    bidi)
      if connect "$HOST2_NQN" --dhchap-secret="$HOST2_KEY" --dhchap-ctrl-secret="$HOST2_CTRL_KEY" -i 2; then
        pass "bidi: connected with --dhchap-secret and --dhchap-ctrl-secret"
        verified_io bidi 1
      else
        failc "bidi: connect"
      fi
      echo "INFO: $c took $(( $(date +%s) - t0 )) s"
      nvme disconnect -n "$NQN" || failc "bidi: disconnect"
      ;;
    missing) refused missing "$HOST3_NQN" ;;
    ctrlkey) refused ctrlkey "$HOST2_NQN" --dhchap-secret="$HOST2_KEY" --dhchap-ctrl-secret="$WRONG_CTRL_KEY" ;;
    wrong) refused wrong "$HOST1_NQN" --dhchap-secret="$WRONG_KEY" ;;
    *) failc "unknown case $c" ;;
  esac
done
dmesg | grep -iE 'nvme|auth' | tail -n 40
finish
