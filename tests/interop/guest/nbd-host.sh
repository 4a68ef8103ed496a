#!/bin/bash
# nbd-host.sh - our nvmeof command (a static build copied into the share) as the
# NVMe-oF host inside a guest: it is its own RDMA stack (soft RoCEv2 on the guest's
# address), connects to the kernel target of the other guest and maps the namespace
# through the kernel's NBD; then mkfs.ext4, mount, copy a file, compare checksums
# after a remount, umount, disconnect.
#
# Kernel rxe is not used: with rdma_rxe loaded the kernel holds UDP port 4791 (its
# tunnel socket is bound on the wildcard address), so our device cannot bind
# $KPEER_IP:4791. CHECK_RXE=1 demonstrates that first (rxe up, nvmeof discover,
# rxe down again) and prints what nvmeof said.
#
# env (defaults):
#   NVMEOF=/share/nvmeof                 the binary
#   TARGET_ADDR=$KPEER_PEER_ADDR  TRSVCID=4420
#   NQN=nqn.2014-08.org.nvmexpress:kpeer-target
#   NS_SIZE_MB=64  FILE_MB=8  CHECK_RXE=1  WAIT_READY_S=600
#   NVMEOF_FLAGS=""   extra flags after discover/connect (e.g. "--provider
#                     ibverbs": our verbs build on the guest's rxe0, which the
#                     caller brought up; then CHECK_RXE=0 and CHECK_UDP=0)
#   CHECK_UDP=1       at the end UDP 4791 must be free (the soft provider let go)
# Prints PASS:/FAIL: lines and "RESULT: PASS|FAIL"; always creates $KPEER_SIGNAL/release.
set -u
NVMEOF_SRC="${NVMEOF:-/share/nvmeof}"
TARGET_ADDR="${TARGET_ADDR:-${KPEER_PEER_ADDR:-192.0.2.2}}"
TRSVCID="${TRSVCID:-4420}"
NQN="${NQN:-nqn.2014-08.org.nvmexpress:kpeer-target}"
NS_SIZE_MB="${NS_SIZE_MB:-64}"
FILE_MB="${FILE_MB:-8}"
CHECK_RXE="${CHECK_RXE:-1}"
CHECK_UDP="${CHECK_UDP:-1}"
NVMEOF_FLAGS="${NVMEOF_FLAGS:-}"
WAIT_READY_S="${WAIT_READY_S:-600}"
MYADDR="${KPEER_IP:-192.0.2.3}"
SIGNAL="${KPEER_SIGNAL:-/tmp/kpeer-signal}"
OUT="${KPEER_OUT:-/tmp}"
RUNDIR=/run/nvmeof
mkdir -p "$SIGNAL"
NFAIL=0 CONNECTED=0 MOUNTED=""

step() { echo; echo "=== $* [t=$(cut -d' ' -f1 /proc/uptime)s]"; }
pass() { echo "PASS: $*"; }
failc() { echo "FAIL: $*"; NFAIL=$((NFAIL + 1)); }
run() { echo "\$ $*"; "$@"; }
finish() {
  # the connection daemons' logs (kept after they exit)
  for f in "$RUNDIR"/nvmeof*.log; do
    [ -e "$f" ] && cp "$f" "$OUT/$(basename "$f")" 2>/dev/null
  done
  [ -n "$MOUNTED" ] && umount "$MOUNTED" 2>/dev/null
  [ "$CONNECTED" = 1 ] && timeout 60 nvmeof disconnect -n "$NQN" >/dev/null 2>&1
  touch "$SIGNAL/release"
  if [ "$NFAIL" = 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL ($NFAIL failed checks)"; fi
  [ "$NFAIL" = 0 ]
  exit $?
}
trap finish EXIT
abort() { failc "$*"; exit 1; }

[ -x "$NVMEOF_SRC" ] || abort "no nvmeof binary at $NVMEOF_SRC"
# run it from the guest's memory, not over 9p
install -m 0755 "$NVMEOF_SRC" /usr/local/bin/nvmeof || abort "install nvmeof"
run nvmeof --help | head -n 3

step "waiting for $SIGNAL/target-ready"
end=$(( $(date +%s) + WAIT_READY_S ))
while [ ! -e "$SIGNAL/target-ready" ]; do
  [ "$(date +%s)" -ge "$end" ] && abort "target never signalled ready"
  [ -e "$SIGNAL/abort" ] && abort "aborted while waiting for the target ($(cat "$SIGNAL/abort"))"
  sleep 1
done
cat "$SIGNAL/target-ready"

if [ "$CHECK_RXE" = 1 ]; then
  step "kernel rxe and our soft device on the same address"
  modprobe rdma_rxe && rdma link add rxe0 type rxe netdev eth0
  rdma link
  echo "UDP sockets on 4791 with rdma_rxe loaded:"
  ss -uan | grep -E ':4791\b' || echo "  (none)"
  out=$(timeout 60 nvmeof discover -t rdma -a "$TARGET_ADDR" -s "$TRSVCID" -w "$MYADDR" 2>&1)
  rc=$?
  echo "$out" | tail -n 5
  echo "INFO: nvmeof discover -w $MYADDR with kernel rxe loaded: exit $rc: $(echo "$out" | tail -n 1)"
  rdma link delete rxe0
  modprobe -r rdma_rxe || echo "modprobe -r rdma_rxe failed"
  echo "UDP sockets on 4791 after removing rdma_rxe:"
  ss -uan | grep -E ':4791\b' || echo "  (none)"
fi

step "modprobe nbd"
modprobe nbd || abort "modprobe nbd"
ls /dev/nbd* | head -n 3

step "nvmeof discover $NVMEOF_FLAGS -t rdma -a $TARGET_ADDR -s $TRSVCID -w $MYADDR"
# shellcheck disable=SC2086
if out=$(timeout 90 nvmeof discover $NVMEOF_FLAGS -t rdma -a "$TARGET_ADDR" -s "$TRSVCID" -w "$MYADDR" 2>&1); then
  echo "$out"
  grep -q "subnqn: *$NQN" <<< "$out" && pass "discover: $NQN listed" || failc "discover: $NQN not listed"
else
  echo "$out"; abort "discover"
fi

step "nvmeof connect $NVMEOF_FLAGS -t rdma -a $TARGET_ADDR -s $TRSVCID -n $NQN -w $MYADDR --map nbd"
t0=$(date +%s.%N)
# shellcheck disable=SC2086
if out=$(timeout 120 nvmeof connect $NVMEOF_FLAGS -t rdma -a "$TARGET_ADDR" -s "$TRSVCID" -n "$NQN" -w "$MYADDR" --map nbd 2>&1); then
  CONNECTED=1
  echo "$out"
  pass "connect in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f s", b - a }')"
else
  echo "$out"; abort "connect"
fi
DEV=$(grep -m1 -o '^/dev/nbd[0-9]*$' <<< "$out")
[ -n "$DEV" ] && [ -b "$DEV" ] || abort "connect printed no /dev/nbdN block device"
size=$(blockdev --getsize64 "$DEV")
[ "$size" = $((NS_SIZE_MB << 20)) ] && pass "$DEV: $size bytes" || failc "$DEV: $size bytes, want $((NS_SIZE_MB << 20))"
run nvmeof list || failc "nvmeof list"

step "mkfs.ext4 $DEV"
run mkfs.ext4 -q -F -E nodiscard "$DEV" && pass "mkfs.ext4" || abort "mkfs.ext4"
mkdir -p /mnt/ns
run mount -t ext4 "$DEV" /mnt/ns && MOUNTED=/mnt/ns && pass "mount" || abort "mount"
dd if=/dev/urandom of=/tmp/file.bin bs=1M count="$FILE_MB" status=none
want=$(sha256sum < /tmp/file.bin | cut -d' ' -f1)
t0=$(date +%s.%N)
cp /tmp/file.bin /mnt/ns/file.bin && sync || failc "copy"
echo "copied $FILE_MB MiB in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f s", b - a }')"
run umount /mnt/ns && MOUNTED="" || failc "umount"
echo 3 > /proc/sys/vm/drop_caches
run mount -t ext4 -o ro "$DEV" /mnt/ns && MOUNTED=/mnt/ns || abort "remount"
got=$(sha256sum < /mnt/ns/file.bin | cut -d' ' -f1)
if [ "$got" = "$want" ]; then pass "sha256 after remount matches ($want)"; else failc "sha256 $got, want $want"; fi
run umount /mnt/ns && MOUNTED="" && pass "umount" || failc "umount"
run fsck.ext4 -n -f "$DEV" >/dev/null 2>&1 && pass "fsck.ext4 -n clean" || failc "fsck.ext4 -n"

step "nvmeof disconnect -n $NQN"
if run timeout 60 nvmeof disconnect -n "$NQN"; then
  CONNECTED=0
  pass "disconnect"
else
  failc "disconnect"
fi
sleep 1
nb=$(basename "$DEV")
left=$(cat "/sys/block/$nb/size" 2>/dev/null)
[ "${left:-0}" = 0 ] && pass "$DEV released (size 0)" || failc "$DEV still has $left sectors after disconnect"
out=$(nvmeof list -o json 2>&1)
echo "$out"
grep -q '"DevicePath"' <<< "$out" && failc "nvmeof list still shows a namespace" || pass "nvmeof list empty"
procs=$(ps -eo pid,args | grep -E '[n]vmeof' | grep -v 'nbd-host' || true)
[ -z "$procs" ] && pass "no nvmeof process left" || { echo "$procs"; failc "nvmeof processes left"; }
if [ "$CHECK_UDP" = 1 ]; then
  ss -uan | grep -E ':4791\b' && failc "UDP 4791 still bound" || pass "UDP 4791 free"
fi
exit 0
