#!/bin/bash
# initiator-target.sh - the Linux kernel NVMe-oF target (nvmet, nvmet-rdma over rxe)
# for our initiator: a variant of kernel-peer's guest/kernel-target.sh that
#   * writes a known pattern into the backing device before the port exists
#     (every 512-byte block of the first PATTERN_MB MiB is
#     "kpeer-pattern blk %08d %0484d\n" with its block number, as kernel-host.sh
#     writes it), so the host can check it reads what the guest wrote;
#   * adds a second subsystem RESTRICTED_NQN with attr_allow_any_host=0 and one
#     allowed host ALLOWED_HOSTNQN (for the refused-host checks);
#   * at release, checks that the host left nothing behind: no RC QP of nvmet-rdma
#     still on rxe0, no controller lost by keep-alive expiry.
#
# env (defaults):
#   NQN=nqn.2014-08.org.nvmexpress:kpeer-target        subsystem (any host), namespace 1
#   RESTRICTED_NQN=nqn.2014-08.org.nvmexpress:kpeer-restricted   allow_any_host=0, no namespace
#   ALLOWED_HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:6b706565-7200-4000-8000-0000000000a1
#   TARGET_ADDR=$KPEER_IP  TRSVCID=4420  TARGET_TRTYPES="rdma tcp"
#   BACKING=null_blk (null_blk | file | loop)  NS_SIZE_MB=64
#   NS_UUID=6b706565-7200-4000-8000-000000000001
#   PATTERN_MB=2           pattern written at offset 0 (0: none)
#   TARGET_WAIT_S=900      STALE_WAIT_S=10 (how long the host's queues may take to go)
# Signals: creates $KPEER_SIGNAL/target-ready; exits at "release" (or "abort").
# Exit: 0 ok, 1 setup failed, 3 timed out waiting, 4 aborted, 5 stale state left.
set -u
LIB="${KPEER_LIB:-$(cd "$(dirname "$0")" && pwd)}"
NQN="${NQN:-nqn.2014-08.org.nvmexpress:kpeer-target}"
RESTRICTED_NQN="${RESTRICTED_NQN:-nqn.2014-08.org.nvmexpress:kpeer-restricted}"
ALLOWED_HOSTNQN="${ALLOWED_HOSTNQN:-nqn.2014-08.org.nvmexpress:uuid:6b706565-7200-4000-8000-0000000000a1}"
TARGET_ADDR="${TARGET_ADDR:-${KPEER_IP:-192.0.2.2}}"
TRSVCID="${TRSVCID:-4420}"
TARGET_TRTYPES="${TARGET_TRTYPES:-rdma tcp}"
BACKING="${BACKING:-null_blk}"
NS_SIZE_MB="${NS_SIZE_MB:-64}"
NS_UUID="${NS_UUID:-6b706565-7200-4000-8000-000000000001}"
PATTERN_MB="${PATTERN_MB:-2}"
TARGET_WAIT_S="${TARGET_WAIT_S:-900}"
STALE_WAIT_S="${STALE_WAIT_S:-10}"
SIGNAL="${KPEER_SIGNAL:-/tmp/kpeer-signal}"
mkdir -p "$SIGNAL"
CFG=/sys/kernel/config/nvmet
fail() { echo "FAIL: $*"; exit 1; }
step() { echo; echo "=== $* [t=$(cut -d' ' -f1 /proc/uptime)s]"; }
# rc_qps: the RC QPs on rxe0 (nvmet-rdma's queues; the listener has none)
rc_qps() { rdma resource show qp 2>/dev/null | grep -c 'type RC'; }

case " $TARGET_TRTYPES " in
  *" rdma "*) step "rxe"; . "$LIB/rxe-up.sh" || fail "rxe setup" ;;
esac

step "modules"
modprobe nvmet || fail "modprobe nvmet"
for t in $TARGET_TRTYPES; do modprobe "nvmet_$t" || fail "modprobe nvmet_$t"; done
mountpoint -q /sys/kernel/config || mount -t configfs configfs /sys/kernel/config
[ -d "$CFG" ] || fail "$CFG missing"

step "backing device ($BACKING, $NS_SIZE_MB MiB)"
case "$BACKING" in
  null_blk)
    modprobe null_blk nr_devices=0 || fail "modprobe null_blk"
    NB=/sys/kernel/config/nullb/nullb0
    mkdir -p "$NB" || fail "mkdir $NB"
    echo "$NS_SIZE_MB" > "$NB/size"
    echo 512 > "$NB/blocksize"
    echo 1 > "$NB/memory_backed"
    echo 1 > "$NB/power" || fail "null_blk power on"
    DEV=/dev/nullb0
    [ -e "$DEV" ] || DEV="/dev/nullb$(cat "$NB/index")"
    ;;
  file)
    DEV=/tmp/kpeer-ns0.img
    truncate -s "${NS_SIZE_MB}M" "$DEV" || fail "truncate $DEV"
    ;;
  loop)
    modprobe loop
    truncate -s "${NS_SIZE_MB}M" /tmp/kpeer-ns0.img || fail "truncate"
    DEV=$(losetup -f --show /tmp/kpeer-ns0.img) || fail "losetup"
    ;;
  *) fail "unknown BACKING=$BACKING" ;;
esac
for _ in $(seq 50); do [ -e "$DEV" ] && break; sleep 0.1; done
[ -e "$DEV" ] || fail "$DEV does not exist"
ls -l "$DEV"

if [ "$PATTERN_MB" -gt 0 ]; then
  step "pattern: $PATTERN_MB MiB at offset 0 of $DEV"
  awk -v n=$((PATTERN_MB * 2048)) 'BEGIN { for (i = 0; i < n; i++) printf "kpeer-pattern blk %08d %0484d\n", i, i }' > /tmp/pat.bin
  [ "$(stat -c %s /tmp/pat.bin)" = $((PATTERN_MB * 1048576)) ] || fail "pattern generator"
  oflag=direct
  [ "$BACKING" = file ] && oflag=sync
  dd if=/tmp/pat.bin of="$DEV" bs=64k oflag=$oflag conv=notrunc,fsync status=none || fail "writing the pattern"
  want=$(sha256sum < /tmp/pat.bin | cut -d' ' -f1)
  got=$(dd if="$DEV" bs=64k count=$((PATTERN_MB * 16)) status=none | sha256sum | cut -d' ' -f1)
  [ "$want" = "$got" ] || fail "pattern read back differs ($got, want $want)"
  echo "PASS: pattern written (sha256 $want)"
fi

step "subsystem $NQN"
S="$CFG/subsystems/$NQN"
mkdir "$S" || fail "mkdir subsystem"
echo 1 > "$S/attr_allow_any_host"
[ -e "$S/attr_model" ] && echo "kpeer-linux-nvmet" > "$S/attr_model"
[ -e "$S/attr_serial" ] && echo "kpeer0001" > "$S/attr_serial"
mkdir "$S/namespaces/1" || fail "mkdir namespace"
echo -n "$DEV" > "$S/namespaces/1/device_path" || fail "device_path"
echo "$NS_UUID" > "$S/namespaces/1/device_uuid" 2>/dev/null
echo "$NS_UUID" > "$S/namespaces/1/device_nguid" 2>/dev/null
[ "$BACKING" = file ] && echo 1 > "$S/namespaces/1/buffered_io"
echo 1 > "$S/namespaces/1/enable" || fail "namespace enable"
grep -H . "$S"/attr_* "$S/namespaces/1"/* 2>/dev/null | sed "s|$CFG/||"

step "subsystem $RESTRICTED_NQN (only $ALLOWED_HOSTNQN)"
R="$CFG/subsystems/$RESTRICTED_NQN"
H="$CFG/hosts/$ALLOWED_HOSTNQN"
mkdir "$R" || fail "mkdir restricted subsystem"
echo 0 > "$R/attr_allow_any_host"
[ -e "$R/attr_model" ] && echo "kpeer-restricted" > "$R/attr_model"
mkdir "$H" || fail "mkdir host"
ln -s "$H" "$R/allowed_hosts/$ALLOWED_HOSTNQN" || fail "allow host"
grep -H . "$R"/attr_* 2>/dev/null | sed "s|$CFG/||"
ls -l "$R/allowed_hosts"

pid=1
for t in $TARGET_TRTYPES; do
  step "port $pid: $t $TARGET_ADDR:$TRSVCID"
  P="$CFG/ports/$pid"
  mkdir "$P" || fail "mkdir port $pid"
  echo "$t" > "$P/addr_trtype"
  echo ipv4 > "$P/addr_adrfam"
  echo "$TARGET_ADDR" > "$P/addr_traddr"
  echo "$TRSVCID" > "$P/addr_trsvcid"
  ln -s "$S" "$P/subsystems/$NQN" || fail "enable port $pid ($t)"
  ln -s "$R" "$P/subsystems/$RESTRICTED_NQN" || fail "enable port $pid ($t) for $RESTRICTED_NQN"
  grep -H . "$P"/addr_* "$P"/param_* 2>/dev/null | sed "s|$CFG/||"
  pid=$((pid + 1))
done
dmesg | grep -i nvmet | tail -n 5
echo "RC QPs before the host: $(rc_qps)"

echo "PASS: kernel target up: $NQN and $RESTRICTED_NQN on $TARGET_TRTYPES $TARGET_ADDR:$TRSVCID"
printf 'NQN=%s\nRESTRICTED_NQN=%s\nALLOWED_HOSTNQN=%s\nTARGET_ADDR=%s\nTRSVCID=%s\nTRTYPES=%s\n' \
  "$NQN" "$RESTRICTED_NQN" "$ALLOWED_HOSTNQN" "$TARGET_ADDR" "$TRSVCID" "$TARGET_TRTYPES" \
  > "$SIGNAL/target-ready.tmp" && mv "$SIGNAL/target-ready.tmp" "$SIGNAL/target-ready"

step "waiting for $SIGNAL/release (up to $TARGET_WAIT_S s)"
RC=0
end=$(( $(date +%s) + TARGET_WAIT_S ))
maxqp=0 # most RC QPs seen while the host worked: shows the QP count below means something
while [ ! -e "$SIGNAL/release" ]; do
  [ -e "$SIGNAL/abort" ] && { echo "FAIL: aborted ($(cat "$SIGNAL/abort"))"; RC=4; break; }
  if [ "$(date +%s)" -ge "$end" ]; then echo "FAIL: timeout waiting for release"; RC=3; break; fi
  n=$(rc_qps)
  [ "$n" -gt "$maxqp" ] && { maxqp=$n; echo "RC QPs on rxe0: $n [t=$(cut -d' ' -f1 /proc/uptime)s]"; rdma resource show qp | grep 'type RC'; }
  sleep 1
done
[ "$RC" = 0 ] && echo "released"
echo "most RC QPs seen on rxe0 while the host worked: $maxqp"

step "stale state left by the host"
n=0
for _ in $(seq $((STALE_WAIT_S * 2))); do
  n=$(rc_qps)
  [ "$n" = 0 ] && break
  sleep 0.5
done
rdma resource show qp
rdma resource show cm_id 2>/dev/null
echo "controllers created: $(dmesg | grep -c 'nvmet: creating .* controller')"
if [ "$n" != 0 ]; then
  echo "FAIL: $n RC QPs still open on rxe0 ${STALE_WAIT_S}s after the host finished"
  [ "$RC" = 0 ] && RC=5
else
  echo "PASS: no RC QP left on rxe0"
fi
if dmesg | grep -q 'keep-alive timer .* expired'; then
  dmesg | grep 'keep-alive timer'
  echo "FAIL: a controller was lost by keep-alive expiry (host went away without disconnecting)"
  [ "$RC" = 0 ] && RC=5
else
  echo "PASS: no keep-alive expiry"
fi

step "statistics"
[ "${RXE_UP:-0}" = 1 ] && rxe_counters
dmesg | grep -iE 'nvmet|rdma|rxe' | tail -n 40

step "teardown"
for P in "$CFG"/ports/*; do
  rm -f "$P/subsystems/$NQN" "$P/subsystems/$RESTRICTED_NQN"
  rmdir "$P"
done
echo 0 > "$S/namespaces/1/enable"
rmdir "$S/namespaces/1"
rmdir "$S"
rm -f "$R/allowed_hosts/$ALLOWED_HOSTNQN"
rmdir "$R" "$H"
case "$BACKING" in
  null_blk) echo 0 > "$NB/power"; rmdir "$NB" ;;
  loop) losetup -d "$DEV" ;;
esac
[ -d "$S" ] || [ -d "$R" ] && { echo "FAIL: teardown left a subsystem"; [ "$RC" = 0 ] && RC=1; }
[ "$RC" = 0 ] && echo "PASS: target torn down"
exit "$RC"
