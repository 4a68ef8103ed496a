#!/bin/bash
# tcp-target-host.sh - the Linux kernel's nvme-tcp host against nvmetd's
# NVMe/TCP port on $TARGET_ADDR (issue 25).
#
#   discover  `nvme discover -t tcp` lists NQN with trtype tcp, sectype none
#   for each connection mode in MODES (";"-separated nvme connect options):
#     connect -t tcp -i 2 -Q 64 plus the mode's options (digests, sqflow);
#     queue_count 3 and sqsize 63; id-ctrl (model), id-ns, smart-log;
#     fio crc32c verify on namespace 1 (4k random, 128k sequential, 1M);
#     ext4 on namespace 2: mkfs, mount, copy, sync, umount, remount,
#     compare checksums, fsck; disconnect (the controller must go)
#   restart   (RESTART=1) connect -c 2 -l 60, write a pattern on namespace 2
#     (whose data must outlive nvmetd: a file), ask the host
#     side to SIGKILL and restart nvmetd (tests/interop/host/nvmetd-restart.sh
#     as the host command), read the pattern back and write again: I/O waits
#     for the kernel's reconnect; the controller must be live again
#
# env (defaults): TARGET_ADDR=$KPEER_PEER_ADDR (192.0.2.1) TRSVCID=4420
#   NQN (required) MODEL  FIO_MB=4  DISCOVER_TRIES=20
#   MODES="--hdr-digest --data-digest --disable-sqflow;defaults"
#   (";"-separated; "defaults" is nvme connect without further options)
# Prints PASS:/FAIL: lines and "RESULT: PASS|FAIL"; exits non-zero on failure.
set -u
TARGET_ADDR="${TARGET_ADDR:-${KPEER_PEER_ADDR:-192.0.2.1}}"
TRSVCID="${TRSVCID:-4420}"
NQN="${NQN:?}"
MODEL="${MODEL:-}"
FIO_MB="${FIO_MB:-4}"
DISCOVER_TRIES="${DISCOVER_TRIES:-20}"
MODES="${MODES:---hdr-digest --data-digest --disable-sqflow;defaults}"
RESTART="${RESTART:-0}"
SIGNAL="${KPEER_SIGNAL:-/tmp/kpeer-signal}"
NFAIL=0
MONPID=""

step() { echo; echo "=== $* [t=$(cut -d' ' -f1 /proc/uptime)s]"; }
pass() { echo "PASS: $*"; }
failc() { echo "FAIL: $*"; NFAIL=$((NFAIL + 1)); }
abort() { failc "$*"; exit 1; }
run() { echo "\$ $*"; "$@"; }
finish() {
  [ -n "$MONPID" ] && kill "$MONPID" 2>/dev/null
  mountpoint -q /mnt && umount /mnt
  nvme disconnect-all >/dev/null 2>&1
  echo
  echo "=== dmesg (nvme)"
  dmesg | grep -iE 'nvme' | tail -n 60
  # Errors count up to the restart step, which causes some on purpose.
  [ -e /tmp/dmesg-before-restart ] || dmesg > /tmp/dmesg-before-restart
  # mkfs.ext4 discards: Linux sends the ranges in a 4 KiB buffer, which
  # the target takes as nvmet does (a refusal shows as Cmd(0x9) here).
  if grep -iE 'nvme' /tmp/dmesg-before-restart | grep -qiE 'digest|error|failed|unexpected|WARNING|reconnect|reset'; then
    failc "the kernel logged nvme-tcp errors (above)"
  fi
  if [ "$NFAIL" = 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL ($NFAIL failed checks)"; fi
  [ "$NFAIL" = 0 ]
  exit $?
}
trap finish EXIT

# ctrl_of NQN: the tcp controller (nvmeN) of subsystem NQN.
ctrl_of() {
  local c
  for c in /sys/class/nvme/nvme*; do
    [ -e "$c/subsysnqn" ] || continue
    [ "$(cat "$c/subsysnqn")" = "$1" ] && [ "$(cat "$c/transport")" = tcp ] || continue
    basename "$c"
    return 0
  done
  return 1
}
# wait_ns NQN NSID: the block device (nvmeXnY) of a namespace, waiting up to 10 s.
wait_ns() {
  local b
  for _ in $(seq 100); do
    for b in /sys/block/nvme*; do
      [[ "$(basename "$b")" =~ ^nvme[0-9]+n[0-9]+$ ]] || continue
      [ "$(cat "$b/device/subsysnqn" 2>/dev/null)" = "$1" ] || continue
      [ "$(cat "$b/nsid" 2>/dev/null)" = "$2" ] || continue
      [ -b "/dev/$(basename "$b")" ] || continue
      basename "$b"
      return 0
    done
    sleep 0.1
  done
  return 1
}
attr() { cat "/sys/class/nvme/$1/$2" 2>/dev/null; }

modprobe nvme-tcp || abort "modprobe nvme-tcp"
echo "kernel $(uname -r), $(nvme version), $(nproc) CPUs"

step "nvme discover -t tcp -a $TARGET_ADDR -s $TRSVCID"
ok=0
for i in $(seq "$DISCOVER_TRIES"); do
  if out=$(nvme discover -t tcp -a "$TARGET_ADDR" -s "$TRSVCID" 2>&1); then ok=1; break; fi
  echo "try $i: $out"
  sleep 1
done
echo "$out"
[ "$ok" = 1 ] || abort "nvme discover never succeeded"
if echo "$out" | grep -q "subnqn: *$NQN" && echo "$out" | grep -q "trtype: *tcp" && echo "$out" | grep -q "sectype: *none" &&
   echo "$out" | grep -q "traddr: *$TARGET_ADDR" && echo "$out" | grep -q "trsvcid: *$TRSVCID"; then
  pass "discover: $NQN at tcp $TARGET_ADDR:$TRSVCID, sectype none"
else
  failc "discover: no tcp entry for $NQN with sectype none"
fi

fio_run() { # NAME ARGS...: fio with the common options; summary lines only
  local name=$1; shift
  echo "\$ fio --name=$name ${common[*]} $*"
  fio --name="$name" "${common[@]}" "$@" > "/tmp/fio-$name.out" 2>&1
  local rc=$?
  grep -E 'err=|verify|bad|IOPS=|READ:|WRITE:' "/tmp/fio-$name.out" | head -n 12
  [ "$rc" = 0 ] || cat "/tmp/fio-$name.out"
  return "$rc"
}

IFS=';' read -r -a modes <<< "$MODES"
for mode in "${modes[@]}"; do
  label="$mode"
  [ "$mode" = defaults ] && mode=""
  step "nvme connect -t tcp -i 2 -Q 64 $mode to $NQN"
  # shellcheck disable=SC2086
  run nvme connect -t tcp -a "$TARGET_ADDR" -s "$TRSVCID" -n "$NQN" -i 2 -Q 64 $mode || { failc "[$label] connect"; continue; }
  CTRL=$(ctrl_of "$NQN") && NS1=$(wait_ns "$NQN" 1) && NS2=$(wait_ns "$NQN" 2) || { failc "[$label] no controller/namespaces"; continue; }
  qc=$(attr "$CTRL" queue_count) sq=$(attr "$CTRL" sqsize)
  echo "$CTRL: $(attr "$CTRL" address), queue_count $qc, sqsize $sq, state $(attr "$CTRL" state)"
  if [ "$qc" = 3 ] && [ "$sq" = 63 ]; then
    pass "[$label] connect: 2 I/O queues (queue_count 3), sqsize 63"
  else
    failc "[$label] connect: queue_count $qc (want 3), sqsize $sq (want 63)"
  fi

  step "[$label] id-ctrl, id-ns, smart-log"
  idc=$(nvme id-ctrl "/dev/$CTRL" 2>&1)
  echo "$idc" | grep -E '^(mn|sn|subnqn|ioccsz|sgls|mdts) '
  if [ -n "$MODEL" ] && ! echo "$idc" | grep -q "^mn *: $MODEL"; then failc "[$label] id-ctrl: model is not $MODEL"; else pass "[$label] id-ctrl"; fi
  if run nvme id-ns "/dev/$NS1" > /tmp/idns.out 2>&1; then grep -E '^(nsze|ncap|nuse) ' /tmp/idns.out; pass "[$label] id-ns"; else cat /tmp/idns.out; failc "[$label] id-ns"; fi
  if run nvme smart-log "/dev/$CTRL" > /tmp/smart.out 2>&1; then head -n 5 /tmp/smart.out; pass "[$label] smart-log"; else cat /tmp/smart.out; failc "[$label] smart-log"; fi

  common=(--filename="/dev/$NS1" --direct=1 --ioengine=libaio --verify=crc32c --verify_fatal=1 --size="${FIO_MB}M" --group_reporting)
  declare -A fjobs=(
    [rand4k]="--rw=randwrite --bs=4k --iodepth=32 --offset=0"
    [seq128k]="--rw=write --bs=128k --iodepth=8 --offset=$((FIO_MB * 2))M"
    [seq1m]="--rw=write --bs=1M --iodepth=2 --offset=$((FIO_MB * 4))M"
  )
  for j in rand4k seq128k seq1m; do
    step "[$label] fio $j: ${fjobs[$j]} ${FIO_MB} MiB, write then read with crc32c verify"
    # shellcheck disable=SC2086
    if fio_run "$j" ${fjobs[$j]} --do_verify=1; then
      pass "[$label] fio $j (${fjobs[$j]% --offset*}): ${FIO_MB} MiB written and verified (crc32c)"
    else
      failc "[$label] fio $j"
    fi
  done

  step "[$label] ext4 on /dev/$NS2"
  ok=1
  run mkfs.ext4 -F -q -E lazy_itable_init=0,lazy_journal_init=0 "/dev/$NS2" || { ok=0; failc "[$label] mkfs.ext4"; }
  mkdir -p /mnt
  if [ "$ok" = 1 ] && run mount -t ext4 "/dev/$NS2" /mnt; then
    mkdir -p /mnt/data/small
    head -c 3M /dev/urandom > /mnt/data/random.bin
    cp "$(command -v fio)" "$(command -v nvme)" /mnt/data/
    cp -a /etc /mnt/data/etc 2>/dev/null
    for i in $(seq 100); do printf 'small file %d %s\n' "$i" "$RANDOM$RANDOM" > "/mnt/data/small/$i.txt"; done
    sync
    (cd /mnt/data && find . -type f -print0 | sort -z | xargs -0 sha256sum) > /tmp/ext4.sums
    echo "$(wc -l < /tmp/ext4.sums) files, $(du -sk /mnt/data | cut -f1) KiB"
    run umount /mnt || { ok=0; failc "[$label] umount"; }
    echo 3 > /proc/sys/vm/drop_caches
    if [ "$ok" = 1 ] && run mount -t ext4 -o ro "/dev/$NS2" /mnt; then
      if (cd /mnt/data && sha256sum --quiet -c /tmp/ext4.sums); then
        pass "[$label] ext4: $(wc -l < /tmp/ext4.sums) files copied, synced, remounted and read back identical"
      else
        failc "[$label] ext4: files differ after remount"
      fi
      umount /mnt || failc "[$label] umount (2)"
      if run fsck.ext4 -fn "/dev/$NS2" > /tmp/fsck.out 2>&1; then pass "[$label] fsck.ext4 -fn clean"; else cat /tmp/fsck.out; failc "[$label] fsck.ext4 -fn"; fi
    else
      failc "[$label] remount"
    fi
  else
    [ "$ok" = 1 ] && failc "[$label] mount"
  fi

  step "[$label] nvme disconnect -d $CTRL"
  if run nvme disconnect -d "$CTRL"; then
    for _ in $(seq 100); do [ -e "/sys/class/nvme/$CTRL" ] || break; sleep 0.1; done
    if [ -e "/sys/class/nvme/$CTRL" ]; then failc "[$label] disconnect: $CTRL still present after 10 s"; else pass "[$label] disconnect: $CTRL removed"; fi
  else
    failc "[$label] nvme disconnect -d $CTRL"
  fi
done

# pattern_io DEV OFFSET_MIB TAG write|check: 2 MiB where every 512-byte
# block names TAG and its number, written (direct) or read back and compared.
pattern_io() {
  local dev=$1 off=$2 tag=$3
  [ -e "/tmp/$tag.pat" ] || awk -v tag="$tag" 'BEGIN { for (i = 0; i < 4096; i++) printf "%-12s blk %08d %0485d\n", tag, i, i }' > "/tmp/$tag.pat"
  if [ "$4" = write ]; then
    timeout 300 dd if="/tmp/$tag.pat" of="/dev/$dev" bs=64k seek=$((off * 16)) oflag=direct conv=fsync status=none
  else
    timeout 300 dd if="/dev/$dev" of="/tmp/$tag.back" bs=4k skip=$((off * 256)) count=512 iflag=direct status=none &&
      cmp -s "/tmp/$tag.pat" "/tmp/$tag.back"
  fi
}

if [ "$RESTART" = 1 ]; then
  dmesg > /tmp/dmesg-before-restart
  step "restart: nvme connect -t tcp -c 2 -l 60 to $NQN"
  run nvme connect -t tcp -a "$TARGET_ADDR" -s "$TRSVCID" -n "$NQN" -c 2 -l 60 || abort "restart: connect"
  CTRL=$(ctrl_of "$NQN") && NS2=$(wait_ns "$NQN" 2) || abort "restart: no controller/namespace"
  (prev=""; while :; do
     st=$(attr "$CTRL" state || echo gone)
     [ "$st" != "$prev" ] && echo "$(cut -d' ' -f1 /proc/uptime) $st" >> /tmp/states
     prev=$st; sleep 0.1
   done) &
  MONPID=$!
  if pattern_io "$NS2" 2 before write && pattern_io "$NS2" 2 before check; then pass "restart: I/O before SIGKILL verified"; else failc "restart: I/O before SIGKILL"; fi
  echo KILL > "$SIGNAL/restart-target.tmp" && mv "$SIGNAL/restart-target.tmp" "$SIGNAL/restart-target"
  step "restart: waiting for the host side to SIGKILL and restart nvmetd"
  ok=0
  for _ in $(seq 300); do [ -e "$SIGNAL/target-restarted-1" ] && { ok=1; break; }; sleep 0.1; done
  [ "$ok" = 1 ] || abort "restart: nvmetd not restarted within 30 s"
  cat "$SIGNAL/target-restarted-1"
  t0=$(cut -d' ' -f1 /proc/uptime)
  if pattern_io "$NS2" 2 before check && pattern_io "$NS2" 6 after write && pattern_io "$NS2" 6 after check; then
    pass "restart: I/O resumed after SIGKILL (data written before reads back, new writes verified, $(awk -v a="$t0" -v b="$(cut -d' ' -f1 /proc/uptime)" 'BEGIN { printf "%.1f", b - a }') s)"
  else
    failc "restart: I/O after SIGKILL"
  fi
  live=0
  for _ in $(seq 600); do
    [ "$(attr "$CTRL" state)" = live ] && dmesg | grep -q 'Successfully reconnected' && { live=1; break; }
    sleep 0.1
  done
  echo "state changes:"; cat /tmp/states
  if [ "$live" = 1 ]; then
    pass "restart: the kernel reconnected ($(dmesg | grep 'Successfully reconnected' | tail -n1 | sed 's/^\[[^]]*\] //')), state live"
  else
    failc "restart: controller not live/reconnected within 60 s (state $(attr "$CTRL" state))"
  fi
  kill "$MONPID" 2>/dev/null; MONPID=""
  step "restart: nvme disconnect -d $CTRL"
  run nvme disconnect -d "$CTRL" || failc "restart: disconnect"
fi
