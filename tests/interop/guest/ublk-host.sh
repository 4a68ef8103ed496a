#!/bin/bash
# ublk-host.sh - our nvmeof (static build, soft RoCEv2 on the guest's address,
# no kernel rxe) in a 6.12 guest maps the namespaces of nvmetd (on the host side,
# 192.0.2.1) through the kernel's ublk driver: connect --map ublk, mkfs.ext4,
# mount, copy, sha256 after a remount, disconnect refused while mounted, fsck,
# blkdiscard -z, fio verify on the block device, a namespace added by nvmetd
# (SIGHUP) mapped as a second ublk disk and unmapped when nvmetd removes it
# again, disconnect (disks and devices gone,
# daemon exited); then fio 4k randread QD1/QD32 on the same namespace mapped
# through ublk and through NBD; then namespace 1 grown by nvmetd (SIGHUP,
# $SIGNAL/grow-ns -> $SIGNAL/ns-grown) while mapped through NBD and ublk (two
# controllers): the NBD disk grows in place, the ublk disk too on 6.16+ (else
# it keeps its size and the daemon's log says why); last, a daemon killed
# with SIGKILL: its disk goes away with it and `nvmeof list` deletes the
# stopped device.
#
# env (defaults):
#   TARGET_ADDR=$KPEER_HOST_ADDR  TRSVCID=4420  NQN=nqn.2014-08.org.nvmexpress:kpeer-target
#   NS_SIZE_MB=64  NS2_SIZE_MB=32  NS_GROWN_MB=96  FILE_MB=8  FIO_VERIFY_MB=16  PERF_S=8  PERF_ROUNDS=2
#   KATO=30    keep-alive timeout of the connections (s)
#   ADD_NS=1   ask the host side for a second namespace, 4 KiB blocks ($SIGNAL/add-ns
#              -> $SIGNAL/ns-added), check it is mapped, then for its removal
#              ($SIGNAL/del-ns -> $SIGNAL/ns-deleted) and check it is unmapped
# Prints PASS:/FAIL:/INFO: lines, "PERF: <map> <job> <iops>" and "RESULT: PASS|FAIL".
set -u
# shellcheck source=/dev/null
. "${INTEROP:-/share/interop}/guest/lib.sh"
TARGET_ADDR="${TARGET_ADDR:-${KPEER_HOST_ADDR:-192.0.2.1}}"
TRSVCID="${TRSVCID:-4420}"
NQN="${NQN:-nqn.2014-08.org.nvmexpress:kpeer-target}"
NS_SIZE_MB="${NS_SIZE_MB:-64}"
NS2_SIZE_MB="${NS2_SIZE_MB:-32}"
NS_GROWN_MB="${NS_GROWN_MB:-96}"
FILE_MB="${FILE_MB:-8}"
FIO_VERIFY_MB="${FIO_VERIFY_MB:-16}"
PERF_S="${PERF_S:-8}"
PERF_ROUNDS="${PERF_ROUNDS:-2}"
KATO="${KATO:-30}"
ADD_NS="${ADD_NS:-1}"
MYADDR="${KPEER_IP:-192.0.2.2}"
RUNDIR=/run/nvmeof
CONNECTED=0 MOUNTED=""

finish() {
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

secs() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

# connect MAP [FLAG...]: connect with --map MAP (and FLAGs), set DEV to the
# first device printed and CONNECT_OUT to all it printed (stdout and stderr).
connect() {
  local map=$1 out t0
  shift
  step "nvmeof connect -t rdma -a $TARGET_ADDR -s $TRSVCID -n $NQN -w $MYADDR -k $KATO --map $map $*"
  t0=$(date +%s.%N)
  # keep-alive 30 s: a TCG guest on a loaded machine misses the 5 s default
  # (seen: nvmetd expired the controller mid-fio at a host load of 30).
  if out=$(timeout 120 nvmeof connect -t rdma -a "$TARGET_ADDR" -s "$TRSVCID" -n "$NQN" -w "$MYADDR" -k "$KATO" --map "$map" "$@" 2>&1); then
    CONNECTED=1
    echo "$out"
    pass "connect --map $map in $(secs "$t0") s"
  else
    echo "$out"
    for f in "$RUNDIR"/nvmeof*.log; do [ -e "$f" ] && tail -n 30 "$f"; done
    abort "connect --map $map"
  fi
  CONNECT_OUT=$out
  DEV=$(grep -m1 -oE '^/dev/(ublkb|nbd)[0-9]+$' <<< "$out")
  [ -n "$DEV" ] && [ -b "$DEV" ] || abort "connect --map $map printed no block device"
}

# disconnect: nvmeof disconnect, then no daemon left.
disconnect() {
  if run timeout 60 nvmeof disconnect -n "$NQN"; then
    CONNECTED=0
    pass "disconnect"
  else
    failc "disconnect"
  fi
  for _ in $(seq 50); do pgrep -x nvmeof >/dev/null || break; sleep 0.2; done
  procs=$(pgrep -a -x nvmeof || true)
  [ -z "$procs" ] && pass "no nvmeof process left" || { echo "$procs"; failc "nvmeof processes left"; }
}

# perf MAP: fio 4k random reads at QD1 and QD32 on $DEV, "PERF: MAP JOB IOPS".
perf() {
  local map=$1 qd line iops
  for qd in 1 32; do
    line=$(fio --name="qd$qd" --filename="$DEV" --rw=randread --bs=4k --direct=1 --ioengine=libaio \
      --iodepth="$qd" --size="$((NS_SIZE_MB / 2))M" --time_based --runtime="$PERF_S" --ramp_time=1 \
      --output-format=terse --terse-version=3 2>&1 | grep '^3;')
    iops=$(cut -d';' -f8 <<< "$line")
    if [ -n "$iops" ] && [ "$iops" -gt 0 ] 2>/dev/null; then
      echo "PERF: $map randread-4k-qd$qd $iops"
    else
      failc "fio randread qd$qd on $DEV ($map): no IOPS ($line)"
    fi
  done
}

cd /tmp || abort "cd /tmp" # fio writes its verify state into the working directory
install_bins
command -v nvmeof >/dev/null || abort "no nvmeof in /share/bin"
run uname -r

step "modprobe ublk_drv nbd"
modprobe ublk_drv || abort "modprobe ublk_drv"
[ -c /dev/ublk-control ] && pass "/dev/ublk-control" || abort "no /dev/ublk-control"
modprobe nbd || abort "modprobe nbd"

step "nvmeof discover (nvmetd on $TARGET_ADDR)"
ok=0
for i in $(seq 20); do
  if out=$(timeout 30 nvmeof discover -t rdma -a "$TARGET_ADDR" -s "$TRSVCID" -w "$MYADDR" 2>&1); then ok=1; break; fi
  echo "try $i: $(tail -n 1 <<< "$out")"; sleep 2
done
[ "$ok" = 1 ] || abort "discover"
grep -q "subnqn: *$NQN" <<< "$out" && pass "discover: $NQN listed" || failc "discover: $NQN not listed"

# --- ublk: file system, refusal while mounted, fio verify ---
connect ublk
UDEV=$DEV
case "$UDEV" in /dev/ublkb*) pass "mapped as $UDEV" ;; *) failc "--map ublk gave $UDEV" ;; esac
UID_=${UDEV#/dev/ublkb}
size=$(blockdev --getsize64 "$UDEV")
[ "$size" = $((NS_SIZE_MB << 20)) ] && pass "$UDEV: $size bytes" || failc "$UDEV: $size bytes, want $((NS_SIZE_MB << 20))"
echo "queue: logical $(cat /sys/block/ublkb"$UID_"/queue/logical_block_size) max_sectors_kb $(cat /sys/block/ublkb"$UID_"/queue/max_sectors_kb)" \
  "discard_max $(cat /sys/block/ublkb"$UID_"/queue/discard_max_bytes) write_zeroes_max $(cat /sys/block/ublkb"$UID_"/queue/write_zeroes_max_bytes)" \
  "write_cache $(cat /sys/block/ublkb"$UID_"/queue/write_cache) nr_requests $(cat /sys/block/ublkb"$UID_"/queue/nr_requests)"
run nvmeof list || failc "nvmeof list"
grep -q '"method": *"ublk"' "$RUNDIR"/*/state.json && pass "state.json: method ublk" || { cat "$RUNDIR"/*/state.json; failc "state.json shows no ublk method"; }

step "mkfs.ext4 $UDEV (discards the whole device first)"
run mkfs.ext4 -q -F "$UDEV" && pass "mkfs.ext4" || abort "mkfs.ext4"
mkdir -p /mnt/ns
run mount -t ext4 "$UDEV" /mnt/ns && MOUNTED=/mnt/ns && pass "mount" || abort "mount"
dd if=/dev/urandom of=/tmp/file.bin bs=1M count="$FILE_MB" status=none
want=$(sha256sum < /tmp/file.bin | cut -d' ' -f1)
t0=$(date +%s.%N)
cp /tmp/file.bin /mnt/ns/file.bin && sync || failc "copy"
echo "copied $FILE_MB MiB in $(secs "$t0") s"

step "disconnect while mounted must be refused"
if out=$(timeout 60 nvmeof disconnect -n "$NQN" 2>&1); then
  echo "$out"; failc "disconnect succeeded with $UDEV mounted"; CONNECTED=0
else
  echo "$out"
  grep -qi "mounted\|in use" <<< "$out" && pass "disconnect refused: $(tail -n 1 <<< "$out")" || failc "disconnect failed without saying the device is mounted"
fi
[ -b "$UDEV" ] && cmp -s /tmp/file.bin /mnt/ns/file.bin && pass "still mapped and readable after the refusal" || failc "mapping damaged by the refused disconnect"

run umount /mnt/ns && MOUNTED="" || failc "umount"
echo 3 > /proc/sys/vm/drop_caches
run mount -t ext4 -o ro "$UDEV" /mnt/ns && MOUNTED=/mnt/ns || abort "remount"
got=$(sha256sum < /mnt/ns/file.bin | cut -d' ' -f1)
if [ "$got" = "$want" ]; then pass "sha256 after remount matches ($want)"; else failc "sha256 $got, want $want"; fi
run umount /mnt/ns && MOUNTED="" && pass "umount" || failc "umount"
run fsck.ext4 -n -f "$UDEV" >/dev/null 2>&1 && pass "fsck.ext4 -n clean" || failc "fsck.ext4 -n"

step "blkdiscard -z (REQ_OP_WRITE_ZEROES) on the first MiB"
dd if=/dev/urandom of="$UDEV" bs=1M count=1 oflag=direct status=none
if run blkdiscard -z -o 0 -l 1048576 "$UDEV"; then
  cmp -s <(dd if="$UDEV" bs=1M count=1 iflag=direct status=none) <(head -c 1048576 /dev/zero) \
    && pass "write zeroes reads back as zeroes" || failc "write zeroes: data left"
else
  failc "blkdiscard -z"
fi

step "fio verify on $UDEV ($FIO_VERIFY_MB MiB, 4k-64k random writes, QD 16, crc32c)"
if run fio --name=verify --filename="$UDEV" --rw=randwrite --bsrange=4k-64k --direct=1 --ioengine=libaio \
    --iodepth=16 --size="${FIO_VERIFY_MB}M" --verify=crc32c --do_verify=1 --verify_fatal=1 --randrepeat=0 \
    --output-format=normal > /tmp/fio-verify.txt 2>&1; then
  grep -E 'WRITE:|READ:|err=' /tmp/fio-verify.txt
  pass "fio verify"
else
  tail -n 30 /tmp/fio-verify.txt; failc "fio verify"
fi

if [ "$ADD_NS" = 1 ]; then
  step "a second namespace added by nvmetd (SIGHUP) is mapped, then disconnect removes both"
  before=$(ls /sys/block | grep -c '^ublkb')
  put_signal add-ns
  if wait_signal ns-added 60; then
    got2=""
    for _ in $(seq 150); do
      for b in /sys/block/ublkb*; do
        [ "/dev/$(basename "$b")" = "$UDEV" ] && continue
        [ "$(cat "$b/size")" = $((NS2_SIZE_MB << 11)) ] && got2=/dev/$(basename "$b")
      done
      [ -n "$got2" ] && break
      sleep 0.2
    done
    if [ -n "$got2" ]; then
      pass "namespace 2 mapped as $got2 ($NS2_SIZE_MB MiB; $before ublk disk(s) before)"
      lbs=$(cat "/sys/block/$(basename "$got2")/queue/logical_block_size")
      [ "$lbs" = 4096 ] && pass "$got2: logical block size 4096 as the namespace's" || failc "$got2: logical block size $lbs, want 4096"
      dd if=/dev/urandom of=/tmp/n2.bin bs=64k count=16 status=none
      dd if=/tmp/n2.bin of="$got2" bs=64k oflag=direct status=none
      cmp -s /tmp/n2.bin <(dd if="$got2" bs=64k count=16 iflag=direct status=none) && pass "namespace 2 write/read back" || failc "namespace 2 data"
    else
      ls /sys/block; nvmeof list; failc "namespace 2 not mapped within 30 s"
    fi
    UDEV2=$got2
    if [ -n "$got2" ]; then
      step "namespace 2 removed by nvmetd (SIGHUP): its disk and device go"
      n2=${got2#/dev/ublkb}
      put_signal del-ns
      if wait_signal ns-deleted 60; then
        for _ in $(seq 150); do [ -e "/sys/class/ublk-char/ublkc$n2" ] || break; sleep 0.2; done
        [ -e "/sys/block/ublkb$n2" ] && failc "$got2 still there 30 s after the namespace went" || pass "$got2 unmapped after the namespace was removed"
        [ -e "/sys/class/ublk-char/ublkc$n2" ] && failc "ublkc$n2 still there" || pass "ublkc$n2 deleted after the namespace was removed"
        [ -b "$UDEV" ] && dd if="$UDEV" of=/dev/null bs=4k count=1 iflag=direct status=none && pass "$UDEV still served" || failc "$UDEV lost with namespace 2"
        UDEV2=""
      else
        failc "the host side did not remove the namespace"
      fi
    fi
  else
    failc "the host side did not add the namespace"
    UDEV2=""
  fi
fi

step "the daemon's log: no ublk warning or error"
cp "$RUNDIR"/nvmeof0.log "$OUT/nvmeof-ublk.log" 2>/dev/null
grep -E 'ublk' "$RUNDIR"/nvmeof0.log | tail -n 8
grep -q 'ublkb' "$RUNDIR"/nvmeof0.log || failc "no daemon log with the ublk mappings in $RUNDIR/nvmeof0.log"
if grep -E '\[(WARN|ERROR)\]' "$RUNDIR"/nvmeof0.log | grep -i ublk; then failc "ublk warnings in the daemon's log"; else pass "no ublk warning in the daemon's log"; fi

step "disconnect (ublk)"
disconnect
for _ in $(seq 50); do [ -e "/sys/block/ublkb$UID_" ] || break; sleep 0.2; done
[ -e "/sys/block/ublkb$UID_" ] && failc "/sys/block/ublkb$UID_ still there" || pass "ublkb$UID_ gone"
[ -e "/sys/class/ublk-char/ublkc$UID_" ] && failc "ublkc$UID_ still there (not deleted)" || pass "ublkc$UID_ deleted"
if [ -n "${UDEV2:-}" ]; then
  [ -e "/sys/block/$(basename "$UDEV2")" ] && failc "$UDEV2 still there" || pass "$UDEV2 gone"
fi
ls /sys/class/ublk-char/ 2>/dev/null

# --- the same namespace through ublk and through NBD: fio randread ---
# Alternated PERF_ROUNDS times: under TCG on a shared machine one run says
# more about the machine's load than about the mapping.
for round in $(seq "$PERF_ROUNDS"); do
  step "fio 4k randread, ublk (--map auto must pick ublk), round $round"
  connect auto
  case "$DEV" in /dev/ublkb*) pass "--map auto chose ublk ($DEV)" ;; *) failc "--map auto gave $DEV, want a ublk disk" ;; esac
  grep -qx 'nvmeof0: --map auto chose ublk' <<< "$CONNECT_OUT" && pass "connect said: nvmeof0: --map auto chose ublk" || failc "connect did not say which mapping --map auto chose"
  grep -q "added" <<< "$CONNECT_OUT" && failc "a first connect said it added a path"
  perf ublk
  disconnect
  step "fio 4k randread, nbd, round $round"
  connect nbd
  case "$DEV" in /dev/nbd*) ;; *) failc "--map nbd gave $DEV" ;; esac
  perf nbd
  disconnect
done

# --- namespace 1 grows while mapped (NBD, and ublk through a second controller) ---
if [ "$ADD_NS" = 1 ]; then
  step "namespace 1 grown by nvmetd (SIGHUP) to $NS_GROWN_MB MiB: the mapped disks follow in place"
  connect nbd
  NDEV=$DEV
  connect ublk -D
  GDEV=$DEV
  put_signal grow-ns
  if wait_signal ns-grown 60; then
    want=$((NS_GROWN_MB << 11))
    nb=$(basename "$NDEV")
    for _ in $(seq 150); do [ "$(cat "/sys/block/$nb/size")" = "$want" ] && break; sleep 0.2; done
    got=$(cat "/sys/block/$nb/size")
    [ "$got" = "$want" ] && pass "NBD disk grown in place: $NDEV $((got >> 11)) MiB" || failc "$NDEV: $got sectors 30 s after the namespace grew, want $want"
    dd if="$NDEV" of=/dev/null bs=64k skip=$(((NS_GROWN_MB << 4) - 1)) count=1 iflag=direct status=none && pass "$NDEV: the grown end reads" || failc "$NDEV: the grown end does not read"
    gb=$(basename "$GDEV")
    for _ in $(seq 150); do
      [ "$(cat "/sys/block/$gb/size")" = "$want" ] && break
      grep -q 'UBLK_U_CMD_UPDATE_SIZE' "$RUNDIR"/nvmeof1.log 2>/dev/null && break
      sleep 0.2
    done
    got=$(cat "/sys/block/$gb/size")
    if [ "$got" = "$want" ]; then
      pass "ublk disk grown in place: $GDEV $((got >> 11)) MiB (kernel $(uname -r))"
    elif [ "$got" = $((NS_SIZE_MB << 11)) ] && grep -q 'UBLK_U_CMD_UPDATE_SIZE' "$RUNDIR"/nvmeof1.log; then
      grep 'UBLK_U_CMD_UPDATE_SIZE' "$RUNDIR"/nvmeof1.log | tail -n 1
      pass "ublk disk $GDEV keeps $NS_SIZE_MB MiB on kernel $(uname -r) (no UBLK_U_CMD_UPDATE_SIZE) and the daemon's log says why"
    else
      tail -n 20 "$RUNDIR"/nvmeof1.log; failc "$GDEV: $got sectors and no word in the daemon's log"
    fi
    cp "$RUNDIR"/nvmeof1.log "$OUT/nvmeof-grow-ublk.log" 2>/dev/null
  else
    failc "the host side did not grow the namespace"
  fi
  step "disconnect (grown namespace)"
  disconnect
fi

# --- daemon death ---
step "daemon killed: the disk goes with it, the stopped device is deleted by the next nvmeof list"
connect ublk
KDEV=$DEV K=${DEV#/dev/ublkb}
pid=$(pgrep -n -x nvmeof)
[ -n "$pid" ] || abort "no daemon"
run kill -KILL "$pid"
for _ in $(seq 100); do [ -e "/sys/block/ublkb$K" ] || break; sleep 0.2; done
[ -e "/sys/block/ublkb$K" ] && failc "$KDEV still there 20 s after the daemon died" || pass "$KDEV gone with the daemon"
CONNECTED=0
run nvmeof list
for _ in $(seq 50); do [ -e "/sys/class/ublk-char/ublkc$K" ] || break; sleep 0.2; done
[ -e "/sys/class/ublk-char/ublkc$K" ] && failc "ublkc$K left after nvmeof list" || pass "ublkc$K deleted by the stale cleanup"
left=$(ls /sys/class/ublk-char 2>/dev/null)
[ -z "$left" ] && pass "no ublk device left" || failc "ublk devices left: $left"
exit 0
