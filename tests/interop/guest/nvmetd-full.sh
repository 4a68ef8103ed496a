#!/bin/bash
# nvmetd-full.sh - the Linux kernel's nvme-rdma host (over rxe) against nvmetd
# on $TARGET_ADDR: the kernel-peer checklist of issue 4.
#
# Steps (STEPS, default all, in this order):
#   discover  `nvme discover` lists OPEN_NQN and RESTRICTED_NQN for our host
#             NQN, and only OPEN_NQN for DENIED_HOSTNQN
#   admin     connect OPEN_NQN with defaults; nvme list (model, serial),
#             id-ctrl, id-ns, smart-log, get-log 1..5; disconnect
#   fio       connect OPEN_NQN with -i 2 -Q 64 -k 5 (queue_count 3, sqsize
#             63, kato 5); fio crc32c verify on namespace 1: 4k randwrite,
#             128k sequential, 1M (> MDTS) blocks, then a verify-only pass
#   ext4      (same connection) mkfs.ext4 on namespace 2, mount, copy, sync,
#             umount, remount + compare, fsck; sha256 of the whole namespace
#             into $KPEER_OUT/ns2.sha256; then disconnect
#   hosts     RESTRICTED_NQN: Connect as DENIED_HOSTNQN must fail, as
#             ALLOWED_HOSTNQN must work (with verified I/O)
#   restart   connect OPEN_NQN with -c 2 -l 60; for each signal in RESTARTS
#             (KILL, TERM): verified I/O, ask the host side to restart nvmetd
#             ($KPEER_SIGNAL/restart-target holds the signal; the host writes
#             target-restarted-<n>), I/O again (queued until the kernel has
#             reconnected), the controller must be live again; disconnect.
#             Needs tests/interop/host/nvmetd-restart.sh as --host-cmd.
#
# env (defaults):
#   TARGET_ADDR=$KPEER_PEER_ADDR (192.0.2.1)  TRSVCID=4420
#   OPEN_NQN RESTRICTED_NQN   subsystems (required)
#   HOSTNQN HOSTID            written to /etc/nvme/hostnqn and hostid (nvme-cli's
#                             defaults); must be allowed on RESTRICTED_NQN
#   ALLOWED_HOSTNQN ALLOWED_HOSTID   a second allowed host
#   DENIED_HOSTNQN DENIED_HOSTID     a host RESTRICTED_NQN does not allow
#   MODEL SERIAL              OPEN_NQN's Identify Controller model and serial
#   NS1_BLOCKS NS2_BLOCKS     namespace sizes in 512-byte blocks (checked)
#   FIO_MB=4   DISCOVER_TRIES=20   RESTARTS="KILL TERM"   RECONNECT_WAIT_S=120
#   WAIT_READY_S=0            > 0: first wait (up to that long) for the target's
#                             $KPEER_SIGNAL/target-ready (nvmetd in the other
#                             guest, guest/nvmetd-guest.sh)
# Prints PASS:/FAIL: lines and "RESULT: PASS|FAIL"; exits non-zero on any failure.
set -u
LIB="${KPEER_LIB:-$(cd "$(dirname "$0")" && pwd)}"
TARGET_ADDR="${TARGET_ADDR:-${KPEER_PEER_ADDR:-192.0.2.1}}"
TRSVCID="${TRSVCID:-4420}"
STEPS="${STEPS:-discover admin fio ext4 hosts restart}"
OPEN_NQN="${OPEN_NQN:?}"
RESTRICTED_NQN="${RESTRICTED_NQN:?}"
HOSTNQN="${HOSTNQN:-}" HOSTID="${HOSTID:-}"
ALLOWED_HOSTNQN="${ALLOWED_HOSTNQN:-}" ALLOWED_HOSTID="${ALLOWED_HOSTID:-}"
DENIED_HOSTNQN="${DENIED_HOSTNQN:-}" DENIED_HOSTID="${DENIED_HOSTID:-}"
MODEL="${MODEL:-}" SERIAL="${SERIAL:-}"
NS1_BLOCKS="${NS1_BLOCKS:-}" NS2_BLOCKS="${NS2_BLOCKS:-}"
FIO_MB="${FIO_MB:-4}"
DISCOVER_TRIES="${DISCOVER_TRIES:-20}"
RESTARTS="${RESTARTS:-KILL TERM}"
RECONNECT_WAIT_S="${RECONNECT_WAIT_S:-120}"
WAIT_READY_S="${WAIT_READY_S:-0}"
SIGNAL="${KPEER_SIGNAL:-/tmp/kpeer-signal}"
OUT="${KPEER_OUT:-/tmp}"
mkdir -p "$SIGNAL" "$OUT"
NFAIL=0
MONPID=""

step() { echo; echo "=== $* [t=$(cut -d' ' -f1 /proc/uptime)s]"; }
pass() { echo "PASS: $*"; }
failc() { echo "FAIL: $*"; NFAIL=$((NFAIL + 1)); }
abort() { failc "$*"; exit 1; }
run() { echo "\$ $*"; "$@"; }
has_step() { [[ " $STEPS " == *" $1 "* ]]; }
finish() {
  [ -n "$MONPID" ] && kill "$MONPID" 2>/dev/null
  mountpoint -q /mnt && umount /mnt
  nvme disconnect-all >/dev/null 2>&1
  touch "$SIGNAL/release"
  echo
  echo "=== dmesg (nvme, rdma)"
  dmesg | grep -iE 'nvme|rdma|rxe' | tail -n 60
  if [ "$NFAIL" = 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL ($NFAIL failed checks)"; fi
  [ "$NFAIL" = 0 ]
  exit $?
}
trap finish EXIT

# ctrl_of NQN [HOSTNQN]: the controller (nvmeN) of subsystem NQN over rdma
# to TARGET_ADDR, optionally connected as HOSTNQN.
ctrl_of() {
  local c
  for c in /sys/class/nvme/nvme*; do
    [ -e "$c/subsysnqn" ] || continue
    [ "$(cat "$c/subsysnqn")" = "$1" ] && [ "$(cat "$c/transport")" = rdma ] || continue
    [ -z "${2:-}" ] || [ "$(cat "$c/hostnqn" 2>/dev/null)" = "$2" ] || continue
    basename "$c"
    return 0
  done
  return 1
}
# ns_of NQN NSID: the block device (nvmeXnY) of namespace NSID of subsystem NQN.
ns_of() {
  local b
  for b in /sys/block/nvme*; do
    [[ "$(basename "$b")" =~ ^nvme[0-9]+n[0-9]+$ ]] || continue
    [ "$(cat "$b/device/subsysnqn" 2>/dev/null)" = "$1" ] || continue
    [ "$(cat "$b/nsid" 2>/dev/null)" = "$2" ] || continue
    [ -b "/dev/$(basename "$b")" ] || continue
    basename "$b"
    return 0
  done
  return 1
}
# wait_ns NQN NSID: ns_of, waiting up to 10 s for the device to appear.
wait_ns() {
  local d
  for _ in $(seq 100); do
    d=$(ns_of "$1" "$2") && { echo "$d"; return 0; }
    sleep 0.1
  done
  return 1
}
# connect NQN OPTS...: nvme connect to TARGET_ADDR.
connect() {
  local nqn=$1; shift
  run nvme connect -t rdma -a "$TARGET_ADDR" -s "$TRSVCID" -n "$nqn" "$@"
}
# disconnect_ctrl CTRL: nvme disconnect -d, then the controller must be gone.
disconnect_ctrl() {
  local c=$1
  if run nvme disconnect -d "$c"; then
    for _ in $(seq 100); do [ -e "/sys/class/nvme/$c" ] || break; sleep 0.1; done
    if [ -e "/sys/class/nvme/$c" ]; then
      failc "disconnect $c: controller still present after 10 s"
    else
      pass "disconnect $c: controller removed"
    fi
  else
    failc "nvme disconnect -d $c"
  fi
}
# pattern FILE MIB TAG: MIB MiB where every 512-byte block names TAG and its number.
pattern() {
  awk -v n=$(($2 * 2048)) -v tag="$3" \
    'BEGIN { for (i = 0; i < n; i++) printf "%-12s blk %08d %0485d\n", tag, i, i }' > "$1"
}
# io_check DEV OFFSET_MIB MIB TAG: direct write of a pattern with 64 KiB and
# 4 KiB blocks, read back (direct) and compare.
io_check() {
  local dev=$1 off=$2 mb=$3 tag=$4
  pattern "/tmp/$tag.pat" "$mb" "$tag"
  if timeout 300 dd if="/tmp/$tag.pat" of="/dev/$dev" bs=64k seek=$((off * 16)) oflag=direct conv=fsync status=none &&
     timeout 300 dd if="/dev/$dev" of="/tmp/$tag.back" bs=4k skip=$((off * 256)) count=$((mb * 256)) iflag=direct status=none &&
     cmp -s "/tmp/$tag.pat" "/tmp/$tag.back"; then
    return 0
  fi
  return 1
}
# read_check DEV OFFSET_MIB TAG: read back what io_check wrote and compare.
read_check() {
  local dev=$1 off=$2 tag=$3 mb
  mb=$(( $(stat -c %s "/tmp/$tag.pat") / 1048576 ))
  timeout 300 dd if="/dev/$dev" of="/tmp/$tag.back2" bs=64k skip=$((off * 16)) count=$((mb * 16)) iflag=direct status=none &&
    cmp -s "/tmp/$tag.pat" "/tmp/$tag.back2"
}
attr() { cat "/sys/class/nvme/$1/$2" 2>/dev/null; }

step "rxe"
# shellcheck source=/dev/null
. "$LIB/rxe-up.sh" || abort "rxe setup"
modprobe nvme_rdma || abort "modprobe nvme_rdma"
if [ -n "$HOSTNQN" ]; then
  mkdir -p /etc/nvme
  echo "$HOSTNQN" > /etc/nvme/hostnqn
  [ -n "$HOSTID" ] && echo "$HOSTID" > /etc/nvme/hostid
fi
echo "host NQN $(cat /etc/nvme/hostnqn), host ID $(cat /etc/nvme/hostid), $(nproc) CPUs"
echo "steps: $STEPS"

if [ "$WAIT_READY_S" -gt 0 ]; then
  step "waiting for $SIGNAL/target-ready"
  end=$(( $(date +%s) + WAIT_READY_S ))
  while [ ! -e "$SIGNAL/target-ready" ]; do
    [ -e "$SIGNAL/abort" ] && abort "target failed: $(cat "$SIGNAL/abort")"
    [ "$(date +%s)" -ge "$end" ] && abort "target not ready within $WAIT_READY_S s"
    sleep 0.2
  done
  cat "$SIGNAL/target-ready"
fi

# Wait for nvmetd: the first discover is retried until the target listens.
step "nvme discover -t rdma -a $TARGET_ADDR -s $TRSVCID"
ok=0
for i in $(seq "$DISCOVER_TRIES"); do
  if out=$(nvme discover -t rdma -a "$TARGET_ADDR" -s "$TRSVCID" 2>&1); then ok=1; break; fi
  echo "attempt $i: $out"
  sleep 3
done
echo "$out"
[ "$ok" = 1 ] || abort "discover (${out##*$'\n'})"

if has_step discover; then
  n=$(grep -c '^=====Discovery Log Entry' <<< "$out")
  if grep -q "subnqn: *$OPEN_NQN\$" <<< "$out" && grep -q "subnqn: *$RESTRICTED_NQN\$" <<< "$out"; then
    pass "discover: $OPEN_NQN and $RESTRICTED_NQN listed ($n entries)"
  else
    failc "discover: both subsystems should be listed"
  fi
  if [ "$(grep -c "traddr: *$TARGET_ADDR\$" <<< "$out")" = "$n" ] &&
     [ "$(grep -c "trtype: *rdma\$" <<< "$out")" = "$n" ] &&
     [ "$(grep -c "trsvcid: *$TRSVCID\$" <<< "$out")" = "$n" ]; then
    pass "discover: every entry is rdma $TARGET_ADDR:$TRSVCID"
  else
    failc "discover: entries with another transport address"
  fi
  if [ -n "$DENIED_HOSTNQN" ]; then
    step "nvme discover as $DENIED_HOSTNQN"
    if out=$(nvme discover -t rdma -a "$TARGET_ADDR" -s "$TRSVCID" --hostnqn="$DENIED_HOSTNQN" --hostid="$DENIED_HOSTID" 2>&1); then
      echo "$out"
      if grep -q "subnqn: *$OPEN_NQN\$" <<< "$out" && ! grep -q "subnqn: *$RESTRICTED_NQN\$" <<< "$out"; then
        pass "discover as a host not allowed on $RESTRICTED_NQN: only $OPEN_NQN listed"
      else
        failc "discover as $DENIED_HOSTNQN: want $OPEN_NQN listed and $RESTRICTED_NQN hidden"
      fi
    else
      echo "$out"; failc "discover as $DENIED_HOSTNQN"
    fi
  fi
fi

if has_step admin; then
  step "nvme connect (defaults) to $OPEN_NQN"
  if connect "$OPEN_NQN"; then
    CTRL=$(ctrl_of "$OPEN_NQN") && NS1=$(wait_ns "$OPEN_NQN" 1) && NS2=$(wait_ns "$OPEN_NQN" 2) ||
      abort "no controller/namespaces for $OPEN_NQN"
    pass "connect with defaults: /dev/$CTRL, namespaces /dev/$NS1 /dev/$NS2"
    qc=$(attr "$CTRL" queue_count) sq=$(attr "$CTRL" sqsize) kato=$(attr "$CTRL" kato)
    echo "queue_count $qc (admin + I/O), sqsize $sq, kato $kato, cntlid $(attr "$CTRL" cntlid), state $(attr "$CTRL" state)"
    [ "${qc:-0}" -ge 2 ] && pass "defaults: $((qc - 1)) I/O queues, sqsize $sq, kato $kato" || failc "defaults: queue_count $qc"

    step "nvme list"
    out=$(nvme list 2>&1); echo "$out"
    if grep "/dev/$NS1 " <<< "$out" | grep -q -- "$SERIAL" && grep "/dev/$NS1 " <<< "$out" | grep -q -- "$MODEL"; then
      pass "nvme list: /dev/$NS1 shows model $MODEL, serial $SERIAL"
    else
      failc "nvme list: model $MODEL / serial $SERIAL not shown for /dev/$NS1"
    fi
    run nvme list-subsys

    step "nvme id-ctrl /dev/$CTRL"
    if out=$(nvme id-ctrl "/dev/$CTRL" 2>&1); then
      echo "$out"
      f() { awk -v k="$1" '$1 == k { sub(/^[^:]*: */, ""); sub(/ *$/, ""); print; exit }' <<< "$out"; }
      if [ "$(f sn)" = "$SERIAL" ] && [ "$(f mn)" = "$MODEL" ] && [ "$(f subnqn)" = "$OPEN_NQN" ]; then
        pass "id-ctrl: sn $(f sn), mn $(f mn), subnqn matches, mdts $(f mdts), ioccsz $(f ioccsz), sgls $(f sgls)"
      else
        failc "id-ctrl: sn '$(f sn)' mn '$(f mn)' subnqn '$(f subnqn)'"
      fi
    else
      echo "$out"; failc "id-ctrl"
    fi

    step "nvme id-ns"
    for d in "$NS1:$NS1_BLOCKS" "$NS2:$NS2_BLOCKS"; do
      dev=${d%%:*} want=${d#*:}
      if out=$(nvme id-ns "/dev/$dev" 2>&1); then
        echo "$out"
        nsze=$(awk '$1 == "nsze" { print $3; exit }' <<< "$out")
        if [ -z "$want" ] || [ "$((nsze))" = "$want" ]; then
          pass "id-ns /dev/$dev: nsze $nsze"
        else
          failc "id-ns /dev/$dev: nsze $nsze, want $want"
        fi
      else
        echo "$out"; failc "id-ns /dev/$dev"
      fi
    done
    step "nvme id-ns-descs / ns-descs"
    run nvme ns-descs "/dev/$NS1" || true

    step "nvme smart-log"
    if out=$(nvme smart-log "/dev/$CTRL" 2>&1); then
      echo "$out"; pass "smart-log"
    else
      echo "$out"; failc "smart-log"
    fi

    step "nvme get-log"
    for l in 1:64 2:512 3:512 4:4096 5:4096; do
      id=${l%%:*} len=${l#*:}
      if out=$(nvme get-log "/dev/$CTRL" --log-id="$id" --log-len="$len" 2>&1); then
        echo "$out" | head -n 8
        pass "get-log --log-id=$id --log-len=$len"
      else
        echo "$out"; failc "get-log --log-id=$id --log-len=$len"
      fi
    done
    step "nvme get-property CAP/VS/CC/CSTS"
    gp=0
    for off in 0x0 0x8 0x14 0x1c; do run nvme get-property "/dev/$CTRL" --offset=$off -H || gp=1; done
    [ "$gp" = 0 ] && pass "get-property CAP VS CC CSTS" || failc "get-property"

    step "nvme disconnect (defaults connection)"
    disconnect_ctrl "$CTRL"
  else
    failc "connect with defaults"
  fi
fi

CTRL=""
if has_step fio || has_step ext4; then
  step "nvme connect -i 2 -Q 64 -k 5 to $OPEN_NQN"
  if connect "$OPEN_NQN" -i 2 -Q 64 -k 5; then
    CTRL=$(ctrl_of "$OPEN_NQN") && NS1=$(wait_ns "$OPEN_NQN" 1) && NS2=$(wait_ns "$OPEN_NQN" 2) ||
      abort "no controller/namespaces for $OPEN_NQN"
    qc=$(attr "$CTRL" queue_count) sq=$(attr "$CTRL" sqsize) kato=$(attr "$CTRL" kato)
    echo "queue_count $qc, sqsize $sq, kato $kato"
    if [ "$qc" = 3 ] && [ "$sq" = 63 ] && [ "$kato" = 5 ]; then
      pass "connect -i 2 -Q 64 -k 5: 2 I/O queues (queue_count 3), sqsize 63, kato 5"
    else
      failc "connect -i 2 -Q 64 -k 5: queue_count $qc (want 3), sqsize $sq (want 63), kato $kato (want 5)"
    fi
  else
    abort "connect -i 2 -Q 64 -k 5"
  fi
fi

if has_step fio; then
  mhs=$(cat "/sys/block/$NS1/queue/max_hw_sectors_kb")
  echo "/dev/$NS1: max_hw_sectors_kb $mhs, max_sectors_kb $(cat "/sys/block/$NS1/queue/max_sectors_kb"), nr_requests $(cat "/sys/block/$NS1/queue/nr_requests")"
  [ "$mhs" -lt 1024 ] && pass "1 MiB is more than MDTS ($mhs KiB): the kernel splits 1M blocks" ||
    failc "max_hw_sectors_kb $mhs: 1M blocks would not be split"
  common=(--filename="/dev/$NS1" --direct=1 --ioengine=libaio --verify=crc32c --verify_fatal=1 --size="${FIO_MB}M" --group_reporting)
  fio_run() { # NAME ARGS...: fio with the common options; summary lines only
    local name=$1; shift
    echo "\$ fio --name=$name ${common[*]} $*"
    fio --name="$name" "${common[@]}" "$@" > "/tmp/fio-$name.out" 2>&1
    local rc=$?
    grep -E 'err=|verify|bad|IOPS=|READ:|WRITE:|lat \(usec\): min' "/tmp/fio-$name.out" | head -n 20
    [ "$rc" = 0 ] || cat "/tmp/fio-$name.out"
    return "$rc"
  }
  declare -A fjobs=(
    [rand4k]="--rw=randwrite --bs=4k --iodepth=16 --offset=0"
    [seq128k]="--rw=write --bs=128k --iodepth=4 --offset=$((FIO_MB * 2))M"
    [seq1m]="--rw=write --bs=1M --iodepth=2 --offset=$((FIO_MB * 4))M"
  )
  for j in rand4k seq128k seq1m; do
    step "fio $j: ${fjobs[$j]} ${FIO_MB} MiB, write then read with crc32c verify"
    # shellcheck disable=SC2086
    if fio_run "$j" ${fjobs[$j]} --do_verify=1; then
      pass "fio $j (${fjobs[$j]% --offset*}): ${FIO_MB} MiB written and verified (crc32c)"
    else
      failc "fio $j"
    fi
  done
  step "fio verify-only pass over all three regions"
  vo=0
  for j in rand4k seq128k seq1m; do
    # shellcheck disable=SC2086
    fio_run "$j" ${fjobs[$j]} --verify_only=1 || { vo=1; failc "fio $j verify-only pass"; }
  done
  [ "$vo" = 0 ] && pass "fio verify-only re-read of all regions (4k random, 128k, 1M)"
  step "fio random 4k-1M block sizes, write then read with verify"
  if fio_run mixed --rw=randwrite --bsrange=4k-1M --iodepth=8 --offset=$((FIO_MB * 6))M --do_verify=1; then
    pass "fio random 4k-1M writes verified"
  else
    failc "fio random 4k-1M writes"
  fi
fi

if has_step ext4; then
  step "ext4 on /dev/$NS2"
  ok=1
  run mkfs.ext4 -F -q -E lazy_itable_init=0,lazy_journal_init=0 "/dev/$NS2" || { ok=0; failc "mkfs.ext4"; }
  mkdir -p /mnt
  if [ "$ok" = 1 ] && run mount -t ext4 "/dev/$NS2" /mnt; then
    step "ext4: copy files, sync"
    mkdir -p /mnt/data/small /tmp/src
    head -c 3M /dev/urandom > /tmp/src/random.bin
    cp /tmp/src/random.bin /mnt/data/
    cp "$(command -v fio)" "$(command -v nvme)" /mnt/data/
    cp -a /etc /mnt/data/etc 2>/dev/null
    for i in $(seq 200); do printf 'small file %d %s\n' "$i" "$RANDOM$RANDOM" > "/mnt/data/small/$i.txt"; done
    echo "copied [t=$(cut -d' ' -f1 /proc/uptime)s]"
    sync
    echo "synced [t=$(cut -d' ' -f1 /proc/uptime)s]"
    (cd /mnt/data && find . -type f -print0 | sort -z | xargs -0 sha256sum) > /tmp/ext4.sums
    echo "$(wc -l < /tmp/ext4.sums) files, $(du -sk /mnt/data | cut -f1) KiB"
    df -k /mnt
    step "ext4: umount, remount read-only, compare"
    run umount /mnt || { ok=0; failc "umount"; }
    echo 3 > /proc/sys/vm/drop_caches
    if [ "$ok" = 1 ] && run mount -t ext4 -o ro "/dev/$NS2" /mnt; then
      if (cd /mnt/data && sha256sum --quiet -c /tmp/ext4.sums); then
        pass "ext4: $(wc -l < /tmp/ext4.sums) files copied, synced, remounted and read back identical"
      else
        failc "ext4: files differ after remount"
      fi
      umount /mnt || { ok=0; failc "umount (2)"; }
    else
      failc "remount"
    fi
    if [ "$ok" = 1 ]; then
      step "ext4: fsck, sha256 of the namespace"
      if run fsck.ext4 -fn "/dev/$NS2"; then pass "fsck.ext4 -fn clean"; else failc "fsck.ext4 -fn"; fi
      sum=$(dd if="/dev/$NS2" bs=1M iflag=direct status=none | sha256sum | cut -d' ' -f1)
      size=$(blockdev --getsize64 "/dev/$NS2")
      echo "$sum $size" > "$OUT/ns2.sha256"
      pass "sha256 of /dev/$NS2 ($size bytes) after umount: $sum"
    fi
  else
    [ "$ok" = 1 ] && failc "mount"
  fi
fi

if [ -n "$CTRL" ]; then
  step "nvme disconnect ($CTRL)"
  disconnect_ctrl "$CTRL"
  CTRL=""
fi

if has_step hosts; then
  step "Connect to $RESTRICTED_NQN as $DENIED_HOSTNQN (not allowed)"
  dmesg -C
  if connect "$RESTRICTED_NQN" --hostnqn="$DENIED_HOSTNQN" --hostid="$DENIED_HOSTID"; then
    failc "connect as a host that is not allowed succeeded"
    c=$(ctrl_of "$RESTRICTED_NQN" "$DENIED_HOSTNQN") && run nvme disconnect -d "$c"
  else
    dmesg | tail -n 5
    if ctrl_of "$RESTRICTED_NQN" >/dev/null; then
      failc "a controller of $RESTRICTED_NQN exists after the refused connect"
    elif dmesg | grep -q "Connect for subsystem $RESTRICTED_NQN is not allowed"; then
      pass "connect as $DENIED_HOSTNQN refused (Connect Invalid Host)"
    else
      pass "connect as $DENIED_HOSTNQN refused"
      failc "the kernel did not report Connect Invalid Host for the refused connect"
    fi
  fi
  step "Connect to $RESTRICTED_NQN as $ALLOWED_HOSTNQN (allowed)"
  if connect "$RESTRICTED_NQN" --hostnqn="$ALLOWED_HOSTNQN" --hostid="$ALLOWED_HOSTID"; then
    c=$(ctrl_of "$RESTRICTED_NQN" "$ALLOWED_HOSTNQN") && d=$(wait_ns "$RESTRICTED_NQN" 1) ||
      abort "no controller/namespace for $RESTRICTED_NQN as $ALLOWED_HOSTNQN"
    pass "connect as $ALLOWED_HOSTNQN: /dev/$c (hostnqn $(attr "$c" hostnqn))"
    if io_check "$d" 1 2 allowed; then
      pass "I/O as $ALLOWED_HOSTNQN: 2 MiB written and read back"
    else
      failc "I/O as $ALLOWED_HOSTNQN"
    fi
    disconnect_ctrl "$c"
  else
    failc "connect as $ALLOWED_HOSTNQN (allowed) failed"
  fi
  if [ -n "$HOSTNQN" ]; then
    step "Connect to $RESTRICTED_NQN with the default host NQN (allowed)"
    if connect "$RESTRICTED_NQN"; then
      c=$(ctrl_of "$RESTRICTED_NQN" "$HOSTNQN") && d=$(wait_ns "$RESTRICTED_NQN" 1) ||
        abort "no controller/namespace for $RESTRICTED_NQN"
      if read_check "$d" 1 allowed; then
        pass "default host NQN connected; reads what $ALLOWED_HOSTNQN wrote"
      else
        failc "default host NQN: read-back differs"
      fi
      disconnect_ctrl "$c"
    else
      failc "connect with the default host NQN (allowed) failed"
    fi
  fi
fi

if has_step restart; then
  step "nvme connect -c 2 -l 60 to $OPEN_NQN"
  connect "$OPEN_NQN" -c 2 -l 60 || abort "connect -c 2 -l 60"
  CTRL=$(ctrl_of "$OPEN_NQN") && NS1=$(wait_ns "$OPEN_NQN" 1) || abort "no controller/namespace for $OPEN_NQN"
  echo "/dev/$CTRL /dev/$NS1: reconnect_delay $(attr "$CTRL" reconnect_delay), ctrl_loss_tmo $(attr "$CTRL" ctrl_loss_tmo), kato $(attr "$CTRL" kato)"
  # Log every state change of the controller.
  (prev=""; while :; do
     s=$(attr "$CTRL" state || echo gone)
     [ "$s" != "$prev" ] && echo "$(cut -d' ' -f1 /proc/uptime) $s" >> /tmp/states
     prev=$s; sleep 0.1
   done) &
  MONPID=$!
  n=0
  for sig in $RESTARTS; do
    n=$((n + 1))
    step "restart $n (SIG$sig): verified I/O before"
    if io_check "$NS1" $((8 * n)) 2 "before$n"; then
      pass "restart $n: I/O before SIG$sig verified"
    else
      failc "restart $n: I/O before SIG$sig"
    fi
    before=$(dmesg | grep -c 'Successfully reconnected')
    : > /tmp/states
    echo "$sig" > "$SIGNAL/restart-target.tmp" && mv "$SIGNAL/restart-target.tmp" "$SIGNAL/restart-target"
    step "restart $n: waiting for the host side to restart nvmetd (SIG$sig)"
    ok=0
    for _ in $(seq 300); do [ -e "$SIGNAL/target-restarted-$n" ] && { ok=1; break; }; sleep 0.1; done
    [ "$ok" = 1 ] || { failc "restart $n: the host side did not restart nvmetd within 30 s"; break; }
    cat "$SIGNAL/target-restarted-$n"
    step "restart $n: I/O after (waits for the reconnect)"
    t0=$(cut -d' ' -f1 /proc/uptime)
    if read_check "$NS1" $((8 * n)) "before$n" && io_check "$NS1" $((8 * n + 4)) 2 "after$n"; then
      pass "restart $n: I/O resumed after SIG$sig (data written before reads back; new writes verified; $(awk -v a="$t0" -v b="$(cut -d' ' -f1 /proc/uptime)" 'BEGIN { printf "%.1f", b - a }') s)"
    else
      failc "restart $n: I/O after SIG$sig"
    fi
    live=0
    for _ in $(seq $((RECONNECT_WAIT_S * 10))); do
      [ "$(attr "$CTRL" state)" = live ] && [ "$(dmesg | grep -c 'Successfully reconnected')" -gt "$before" ] && { live=1; break; }
      sleep 0.1
    done
    echo "state changes:"; cat /tmp/states
    dmesg | grep -E "nvme|rdma" | tail -n 12
    if [ "$live" = 1 ]; then
      pass "restart $n: the kernel reconnected after SIG$sig ($(dmesg | grep 'Successfully reconnected' | tail -n1 | sed 's/^\[[^]]*\] //')), state live"
    else
      failc "restart $n: controller not live/reconnected within ${RECONNECT_WAIT_S}s after SIG$sig (state $(attr "$CTRL" state))"
      break
    fi
  done
  kill "$MONPID" 2>/dev/null; MONPID=""
  step "nvme disconnect after the restarts"
  disconnect_ctrl "$CTRL"
  CTRL=""
fi

rxe_counters
exit 0
