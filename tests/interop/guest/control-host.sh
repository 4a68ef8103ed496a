#!/bin/bash
# control-host.sh - the Linux kernel's nvme-rdma host (over rxe) connected to
# nvmetd while the host side drives nvmetd's control API
# (tests/interop/control_test.go). Each step waits for the host side's marker
# in $KPEER_SIGNAL, checks what the kernel sees, and answers with its own:
#
#   connected       connected to NQN as HOSTNQN (-c 1 -l 120); the host side
#                   then finds the controller with ctrl.list
#   ns-added        namespace 2 must appear (the AEN's rescan), NS2_BLOCKS
#                   long                                       -> saw-ns2
#   ns-resized      namespace 2 must become NS2_RESIZED_BLOCKS long; 1 MiB
#                   written past the old end reads back         -> saw-resize
#   host-allowed    `nvme discover` as NEW_HOSTNQN lists NQN (it did not
#                   before)                                     -> saw-host
#   ctrl-disconnected  ctrl.disconnect tore our controller down: the kernel
#                   must reconnect                              -> reconnected
#   target-restarted-1  nvmetd restarted from the saved configuration
#                   (host/nvmetd-restart.sh): the kernel must reconnect,
#                   namespace 2 keep its size and data          -> reconnected-2
#   done            disconnect
#
# env: NQN HOSTNQN HOSTID NEW_HOSTNQN NEW_HOSTID NS2_BLOCKS NS2_RESIZED_BLOCKS
#      (required); TARGET_ADDR=$KPEER_PEER_ADDR TRSVCID=4420 DISCOVER_TRIES=20
#      WAIT_S=300 (each host marker) RECONNECT_WAIT_S=120
# Prints PASS:/FAIL: lines and "RESULT: PASS|FAIL"; exits non-zero on failure.
set -u
TARGET_ADDR="${TARGET_ADDR:-${KPEER_PEER_ADDR:-192.0.2.1}}"
TRSVCID="${TRSVCID:-4420}"
NQN="${NQN:?}" HOSTNQN="${HOSTNQN:?}" HOSTID="${HOSTID:?}"
NEW_HOSTNQN="${NEW_HOSTNQN:?}" NEW_HOSTID="${NEW_HOSTID:?}"
NS2_BLOCKS="${NS2_BLOCKS:?}" NS2_RESIZED_BLOCKS="${NS2_RESIZED_BLOCKS:?}"
DISCOVER_TRIES="${DISCOVER_TRIES:-20}"
WAIT_S="${WAIT_S:-300}"
RECONNECT_WAIT_S="${RECONNECT_WAIT_S:-120}"
SIGNAL="${KPEER_SIGNAL:-/tmp/kpeer-signal}"
mkdir -p "$SIGNAL"
NFAIL=0

step() { echo; echo "=== $* [t=$(cut -d' ' -f1 /proc/uptime)s]"; }
pass() { echo "PASS: $*"; }
failc() { echo "FAIL: $*"; NFAIL=$((NFAIL + 1)); }
abort() { failc "$*"; exit 1; }
run() { echo "\$ $*"; "$@"; }
finish() {
  nvme disconnect-all >/dev/null 2>&1
  touch "$SIGNAL/release"
  echo
  echo "=== dmesg (nvme)"
  dmesg | grep -iE 'nvme' | tail -n 40
  if [ "$NFAIL" = 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL ($NFAIL failed checks)"; fi
  [ "$NFAIL" = 0 ]
  exit $?
}
trap finish EXIT

put_signal() {
  printf '%s\n' "${2:-$(cut -d' ' -f1 /proc/uptime)}" > "$SIGNAL/$1.tmp" && mv "$SIGNAL/$1.tmp" "$SIGNAL/$1"
}
# wait_signal NAME: the host side's marker, or abort (its own abort too).
wait_signal() {
  local end=$(( $(date +%s) + WAIT_S ))
  step "waiting for the host side: $1"
  while [ ! -e "$SIGNAL/$1" ]; do
    [ -e "$SIGNAL/abort" ] && abort "the host side gave up: $(cat "$SIGNAL/abort")"
    [ "$(date +%s)" -ge "$end" ] && abort "no $1 from the host side within ${WAIT_S}s"
    sleep 0.2
  done
}
ctrl_of() {
  local c
  for c in /sys/class/nvme/nvme*; do
    [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$1" ] && [ "$(cat "$c/transport")" = rdma ] || continue
    basename "$c"
    return 0
  done
  return 1
}
ns_of() {
  local b
  for b in /sys/block/nvme*; do
    [[ "$(basename "$b")" =~ ^nvme[0-9]+n[0-9]+$ ]] || continue
    [ "$(cat "$b/device/subsysnqn" 2>/dev/null)" = "$1" ] && [ "$(cat "$b/nsid" 2>/dev/null)" = "$2" ] || continue
    [ -b "/dev/$(basename "$b")" ] || continue
    basename "$b"
    return 0
  done
  return 1
}
# until_true SECONDS CMD...: CMD succeeds within SECONDS (tried every 0.1 s).
until_true() {
  local n=$(($1 * 10)); shift
  for _ in $(seq "$n"); do "$@" && return 0; sleep 0.1; done
  return 1
}
size_is() { [ "$(cat "/sys/block/$1/size" 2>/dev/null)" = "$2" ]; }
reconnected_since() { [ "$(cat "/sys/class/nvme/$CTRL/state" 2>/dev/null)" = live ] && [ "$(dmesg | grep -c 'Successfully reconnected')" -gt "$1" ]; }
# discover_lists HOSTNQN HOSTID: the discovery log for that host lists NQN.
discover_lists() {
  local out
  if ! out=$(nvme discover -t rdma -a "$TARGET_ADDR" -s "$TRSVCID" --hostnqn="$1" --hostid="$2" 2>&1); then
    echo "nvme discover as $1: $out"
    return 1
  fi
  echo "$out" | grep -E 'subnqn|Discovery Log'
  echo "$out" | grep -q "subnqn: *$NQN\$"
}

# shellcheck source=/dev/null
. "${KPEER_LIB:-/share/.kpeer/lib}/rxe-up.sh" || abort "rxe setup"
modprobe nvme_rdma || abort "modprobe nvme_rdma"
mkdir -p /etc/nvme
echo "$HOSTNQN" > /etc/nvme/hostnqn
echo "$HOSTID" > /etc/nvme/hostid

step "discover (nvmetd may still be starting)"
ok=0
for _ in $(seq "$DISCOVER_TRIES"); do
  discover_lists "$HOSTNQN" "$HOSTID" && { ok=1; break; }
  sleep 3
done
[ "$ok" = 1 ] || abort "nvme discover as $HOSTNQN does not list $NQN"
pass "discover as $HOSTNQN lists $NQN"
if discover_lists "$NEW_HOSTNQN" "$NEW_HOSTID"; then
  failc "discover as $NEW_HOSTNQN lists $NQN before the host side allowed it"
else
  pass "discover as $NEW_HOSTNQN does not list $NQN (not allowed yet)"
fi

step "connect"
run nvme connect -t rdma -a "$TARGET_ADDR" -s "$TRSVCID" -n "$NQN" --hostnqn="$HOSTNQN" --hostid="$HOSTID" -c 1 -l 120 ||
  abort "nvme connect"
CTRL=$(until_true 10 ctrl_of "$NQN" >/dev/null && ctrl_of "$NQN") || abort "no controller for $NQN"
NS1=$(until_true 10 ns_of "$NQN" 1 >/dev/null && ns_of "$NQN" 1) || abort "no namespace 1"
pass "connected: /dev/$CTRL, namespace 1 /dev/$NS1, cntlid $(cat "/sys/class/nvme/$CTRL/cntlid")"
put_signal connected "$(cat "/sys/class/nvme/$CTRL/cntlid")"

wait_signal ns-added
if until_true 30 ns_of "$NQN" 2 >/dev/null; then
  NS2=$(ns_of "$NQN" 2)
  pass "namespace 2 appeared as /dev/$NS2 (asynchronous event, rescan)"
  size_is "$NS2" "$NS2_BLOCKS" && pass "namespace 2: $NS2_BLOCKS blocks" || failc "namespace 2: $(cat "/sys/block/$NS2/size") blocks, want $NS2_BLOCKS"
else
  abort "namespace 2 did not appear within 30 s of ns.add"
fi
put_signal saw-ns2

wait_signal ns-resized
if until_true 30 size_is "$NS2" "$NS2_RESIZED_BLOCKS"; then
  pass "namespace 2 resized: $NS2_RESIZED_BLOCKS blocks"
else
  failc "namespace 2: $(cat "/sys/block/$NS2/size" 2>/dev/null) blocks 30 s after ns.resize, want $NS2_RESIZED_BLOCKS"
fi
# 1 MiB just past the old end: only there after the resize.
head -c 1048576 /dev/urandom > /tmp/tail.bin
if run dd if=/tmp/tail.bin of="/dev/$NS2" bs=64k seek=$((NS2_BLOCKS * 512 / 65536)) oflag=direct status=none &&
  run dd if="/dev/$NS2" of=/tmp/tail.back bs=64k skip=$((NS2_BLOCKS * 512 / 65536)) count=16 iflag=direct status=none &&
  cmp /tmp/tail.bin /tmp/tail.back; then
  pass "1 MiB past the old end written and read back"
else
  failc "I/O past the old end of namespace 2"
fi
put_signal saw-resize

wait_signal host-allowed
if discover_lists "$NEW_HOSTNQN" "$NEW_HOSTID"; then
  pass "discover as $NEW_HOSTNQN lists $NQN once allowed"
else
  failc "discover as $NEW_HOSTNQN does not list $NQN after host.allow"
fi
put_signal saw-host

before=$(dmesg | grep -c 'Successfully reconnected')
wait_signal ctrl-disconnected
if until_true "$RECONNECT_WAIT_S" reconnected_since "$before"; then
  pass "reconnected after ctrl.disconnect ($(dmesg | grep 'Successfully reconnected' | tail -n1 | sed 's/^\[[^]]*\] //')), cntlid $(cat "/sys/class/nvme/$CTRL/cntlid")"
else
  abort "not reconnected within ${RECONNECT_WAIT_S}s of ctrl.disconnect (state $(cat "/sys/class/nvme/$CTRL/state"))"
fi
before=$(dmesg | grep -c 'Successfully reconnected')
put_signal reconnected "$(cat "/sys/class/nvme/$CTRL/cntlid")"

wait_signal target-restarted-1
cat "$SIGNAL/target-restarted-1"
if until_true "$RECONNECT_WAIT_S" reconnected_since "$before"; then
  pass "reconnected to nvmetd restarted from the saved configuration"
else
  abort "not reconnected within ${RECONNECT_WAIT_S}s of the restart (state $(cat "/sys/class/nvme/$CTRL/state"))"
fi
NS2=$(until_true 30 ns_of "$NQN" 2 >/dev/null && ns_of "$NQN" 2) || abort "namespace 2 gone after the restart"
if until_true 30 size_is "$NS2" "$NS2_RESIZED_BLOCKS" &&
  run dd if="/dev/$NS2" of=/tmp/tail.back bs=64k skip=$((NS2_BLOCKS * 512 / 65536)) count=16 iflag=direct status=none &&
  cmp /tmp/tail.bin /tmp/tail.back; then
  pass "after the restart namespace 2 has $NS2_RESIZED_BLOCKS blocks and its data"
else
  failc "namespace 2 after the restart: $(cat "/sys/block/$NS2/size") blocks, or its data differs"
fi
put_signal reconnected-2 "$(cat "/sys/class/nvme/$CTRL/cntlid")"

wait_signal done
run nvme disconnect -n "$NQN" || failc "nvme disconnect"
exit 0
