#!/bin/bash
# gateways.sh - the Linux kernel's nvme-rdma or nvme-tcp host (TRTYPE) with native multipath against
# several nvmetd gateways exporting one subsystem (issue 14): one path per
# gateway, one block device per namespace. Needs tests/interop/host/gateways.sh
# as the --host-cmd (it kills, restarts and reloads gateways on request).
#
# Steps, in this order:
#   paths     native multipath is on; discover and connect every gateway of
#             GW_ADDRS (-c 1 -l 600); one subsystem, one controller per
#             gateway (disjoint cntlids), all live; one head device per
#             namespace with one path device per controller; nvme list-subsys
#   ana       (ANA=1) each path's ana_state: gateway 1 optimized, the others
#             non-optimized; I/O goes to gateway 1's path. Then reloads
#             (HUP 1 gw1-b, HUP 2 gw2-b: swap the states) must move the I/O to
#             gateway 2's path, and HUP 1 gw1-a, HUP 2 gw2-a back to gateway 1
#   ana2      (ANA=1, ANA2_NSID) that namespace is in ANA group 2, optimized on
#             gateway 2 and non-optimized on gateway 1 (active/active: each
#             gateway owns a group): its paths' ana_grpid and ana_state, I/O
#             to it on gateway 2's path, nvme-cli's ana-log of each gateway
#             (two groups, their states and NSIDs); the group 1 reloads leave
#             it as it is
#   pattern   IO_MB MiB pattern at offset 0 of namespace 1 (read back)
#   failover  a loop of fio crc32c write+verify runs on namespace 1 while the
#             gateway carrying the I/O is SIGKILLed: the kernel must report that
#             path gone (controller not live), I/O must move to another path;
#             the gateway is started again and the path must come back live;
#             every fio run must pass and the kernel must log no I/O error on
#             the head device
#   fs        (FS_NSID) mkfs.ext4 on that namespace, mount, files, checksums,
#             umount, mount, checksums again, fsck; the sha256 of the whole
#             namespace goes to $KPEER_OUT/fs.sha256 ("HASH BYTES")
#   Last, the pattern at offset 0 is read back again, and all is disconnected.
#
# env (defaults): NQN (required)  GW_ADDRS="192.0.2.1 192.0.2.4"  TRSVCID=4420
#   ANA=0  ANA2_NSID=""  IO_MB=2  FIO_MB=4  FS_NSID=""  DISCOVER_TRIES=20  RECONNECT_WAIT_S=180
#   HOSTNQN HOSTID (written to /etc/nvme/ so every path uses the same host)
# Prints PASS:/FAIL:/INFO: lines and "RESULT: PASS|FAIL"; exits non-zero on failure.
set -u
NQN="${NQN:?NQN not set}"
read -r -a ADDRS <<< "${GW_ADDRS:-192.0.2.1 192.0.2.4}"
TRSVCID="${TRSVCID:-4420}"
ANA="${ANA:-0}"
IO_MB="${IO_MB:-2}"
FIO_MB="${FIO_MB:-4}"
FS_NSID="${FS_NSID:-}"
ANA2_NSID="${ANA2_NSID:-}"
DISCOVER_TRIES="${DISCOVER_TRIES:-20}"
RECONNECT_WAIT_S="${RECONNECT_WAIT_S:-180}"
HOSTNQN="${HOSTNQN:-nqn.2014-08.org.nvmexpress:uuid:6b706565-7200-4000-8000-0000000000b1}"
HOSTID="${HOSTID:-6b706565-7200-4000-8000-0000000000b1}"
SIGNAL="${KPEER_SIGNAL:-/tmp/kpeer-signal}"
OUT="${KPEER_OUT:-/tmp}"
mkdir -p "$SIGNAL" "$OUT"
NFAIL=0 REQ=0 FIOPID="" MONPID="" DOGPID=""
# TRTYPE: the transport, rdma (nvme-rdma on rdma_rxe) or tcp (nvme-tcp).
TRTYPE=${TRTYPE:-rdma}
# FIO_WAIT_S: how long the fio loop may take to end once asked to.
FIO_WAIT_S=${FIO_WAIT_S:-240}
# STEP_WAIT_S: how long one step may take before the watchdog reports a
# hang (the longest, the failover, takes 1-3 minutes on a loaded machine).
STEP_WAIT_S=${STEP_WAIT_S:-420}
declare -a CTRL PATHDEV PATH2

ts() { cut -d' ' -f1 /proc/uptime; }
step() { echo; echo "=== $* [t=$(ts)s]"; touch /tmp/progress "$SIGNAL/progress"; }
pass() { echo "PASS: $*"; }
info() { echo "INFO: $*"; }
failc() { echo "FAIL: $*"; NFAIL=$((NFAIL + 1)); }
abort() { failc "$*"; exit 1; }
run() { echo "\$ $*"; "$@"; }
finish() {
  [ -n "$FIOPID" ] && { touch /tmp/fio-stop; kill "$FIOPID" 2>/dev/null; }
  [ -n "$MONPID" ] && kill "$MONPID" 2>/dev/null
  [ -n "$DOGPID" ] && kill "$DOGPID" 2>/dev/null
  mountpoint -q /mnt && umount /mnt
  timeout 30 nvme disconnect -n "$NQN" >/dev/null 2>&1
  touch "$SIGNAL/release"
  echo
  echo "=== dmesg (nvme, rdma)"
  dmesg | grep -iE 'nvme|rdma|rxe' | tail -n 80
  if [ "$NFAIL" = 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL ($NFAIL failed checks)"; fi
  [ "$NFAIL" = 0 ]
  exit $?
}
trap finish EXIT

# gw OP I [NAME]: ask the host side (host/gateways.sh) to KILL, START or HUP
# gateway I and wait (60 s) for its answer; fails unless it starts with "ok".
gw() {
  REQ=$((REQ + 1))
  echo "$*" > "$SIGNAL/gw-req-$REQ.tmp" && mv "$SIGNAL/gw-req-$REQ.tmp" "$SIGNAL/gw-req-$REQ"
  for _ in $(seq 600); do [ -e "$SIGNAL/gw-done-$REQ" ] && break; sleep 0.1; done
  [ -e "$SIGNAL/gw-done-$REQ" ] || { echo "host side: no answer to '$*' within 60 s"; return 1; }
  echo "host side: $*: $(cat "$SIGNAL/gw-done-$REQ")"
  grep -q '^ok' "$SIGNAL/gw-done-$REQ"
}
# hang_report: the state of the paths, the kernel's log and the blocked
# tasks' stacks, and every gateway's goroutines (SIGQUIT: they go to the
# gateway's log).
hang_report() {
  echo "=== hang report [t=$(ts)s]"
  # The gateways first: the host side answers at once, whatever the guest.
  for i in "${!ADDRS[@]}"; do gw QUIT $((i + 1)); done
  for c in /sys/class/nvme/nvme*; do echo "$(basename "$c"): $(cat "$c/state" 2>/dev/null) $(cat "$c/address" 2>/dev/null)"; done
  echo "controller states:"; cat /tmp/states 2>/dev/null
  timeout 10 nvme list-subsys 2>&1
  for p in /proc/[0-9]*; do
    if grep -q '^State:.*D' "$p/status" 2>/dev/null; then
      echo "blocked task $(basename "$p") ($(cat "$p/comm" 2>/dev/null)):"; timeout 5 cat "$p/stack" 2>/dev/null
    fi
  done
  dmesg | tail -n 60
}
# watchdog: a step that makes no progress for STEP_WAIT_S (a command in
# uninterruptible sleep that no timeout can end) gets a report: the
# gateways dump their goroutines (the host side sees $SIGNAL/dump), the
# paths' states, the blocked tasks' stacks (sysrq w) and the kernel's log;
# then the guest powers off, so that the run ends now with the report
# rather than at the session timeout with nothing.
watchdog() {
  local age
  while sleep 5; do
    age=$(( $(date +%s) - $(stat -c %Y /tmp/progress) ))
    [ "$age" -lt "$STEP_WAIT_S" ] && continue
    echo
    echo "=== watchdog: no progress for $age s [t=$(ts)s]: the current step hangs"
    touch "$SIGNAL/dump"
    for c in /sys/class/nvme/nvme*; do echo "$(basename "$c"): $(cat "$c/state" 2>/dev/null) $(cat "$c/address" 2>/dev/null)"; done
    for p in /proc/[0-9]*; do
      grep -q '^State:.*D' "$p/status" 2>/dev/null && echo "blocked task $(basename "$p"): $(cat "$p/comm" 2>/dev/null) $(tr '\0' ' ' < "$p/cmdline" 2>/dev/null)"
    done
    echo w > /proc/sysrq-trigger 2>/dev/null
    dmesg | tail -n 150
    echo "FAIL: watchdog: a step hung for $age s"
    echo "RESULT: FAIL (hung)"
    for _ in $(seq 100); do [ -e "$SIGNAL/dumped" ] && break; sleep 0.1; done
    sync
    echo o > /proc/sysrq-trigger
    return
  done
}
touch /tmp/progress "$SIGNAL/progress"
watchdog &
DOGPID=$!

# ctrl_at ADDR: the controller of NQN over $TRTYPE to ADDR.
ctrl_at() {
  local c
  for c in /sys/class/nvme/nvme*; do
    [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$NQN" ] || continue
    grep -q "traddr=$1,trsvcid=$TRSVCID" "$c/address" 2>/dev/null || continue
    basename "$c"
    return 0
  done
  return 1
}
# head_of NSID: the multipath head block device of namespace NSID.
head_of() {
  local b
  for b in /sys/block/nvme*; do
    [[ "$(basename "$b")" =~ ^nvme[0-9]+n[0-9]+$ ]] || continue
    [ "$(cat "$b/device/subsysnqn" 2>/dev/null)" = "$NQN" ] || continue
    [ "$(cat "$b/nsid" 2>/dev/null)" = "$1" ] || continue
    [ -b "/dev/$(basename "$b")" ] || continue
    basename "$b"
    return 0
  done
  return 1
}
# path_of CTRL NSID: the (hidden) path device of namespace NSID through CTRL.
path_of() {
  local d
  for d in /sys/class/nvme/"$1"/nvme*c*n"$2"; do
    [ -e "$d" ] && { basename "$d"; return 0; }
  done
  return 1
}
cstate() { cat "/sys/class/nvme/$1/state" 2>/dev/null || echo gone; }
# ios I: completed reads + writes on path I (namespace 1).
ios() { awk '{ print $1 + $5 }' "/sys/class/nvme/${CTRL[$1]}/${PATHDEV[$1]}/stat" 2>/dev/null || echo 0; }
ana_of() { cat "/sys/class/nvme/${CTRL[$1]}/${PATHDEV[$1]}/ana_state" 2>/dev/null || echo none; }
# busy_path: do 1 MiB of direct I/O on namespace 1 (at 40 MiB) and print the
# one path whose counters moved ("" if none or several did).
busy_path() {
  local i before=() moved=()
  for i in "${!CTRL[@]}"; do before[$i]=$(ios "$i"); done
  dd if=/dev/zero of="/dev/$HEAD" bs=64k seek=640 count=16 oflag=direct status=none &&
    dd if="/dev/$HEAD" of=/dev/null bs=64k skip=640 count=16 iflag=direct status=none || return 1
  for i in "${!CTRL[@]}"; do [ "$(ios "$i")" -gt "${before[$i]}" ] && moved+=("$i"); done
  echo "path I/O counters moved: ${moved[*]:-none} ($(for i in "${!CTRL[@]}"; do printf '%s=%s ' "${PATHDEV[$i]}" "$(ios "$i")"; done))" >&2
  [ "${#moved[@]}" = 1 ] && echo "${moved[0]}"
}
# wait_ana I STATE: wait (60 s) until path I's ana_state is STATE.
wait_ana() {
  for _ in $(seq 600); do [ "$(ana_of "$1")" = "$2" ] && return 0; sleep 0.1; done
  return 1
}
# ana2_of I: the ANA state of namespace ANA2_NSID's path through gateway I.
ana2_of() { cat "/sys/class/nvme/${CTRL[$1]}/${PATH2[$1]}/ana_state" 2>/dev/null || echo none; }
# busy_path2: as busy_path, on namespace ANA2_NSID (1 MiB at 1 MiB: the
# namespace may be small).
busy_path2() {
  local i before=() moved=() h
  h=$(head_of "$ANA2_NSID") || return 1
  ios2() { awk '{ print $1 + $5 }' "/sys/class/nvme/${CTRL[$1]}/${PATH2[$1]}/stat" 2>/dev/null || echo 0; }
  for i in "${!CTRL[@]}"; do before[$i]=$(ios2 "$i"); done
  dd if=/dev/zero of="/dev/$h" bs=64k seek=16 count=16 oflag=direct status=none &&
    dd if="/dev/$h" of=/dev/null bs=64k skip=16 count=16 iflag=direct status=none || return 1
  for i in "${!CTRL[@]}"; do [ "$(ios2 "$i")" -gt "${before[$i]}" ] && moved+=("$i"); done
  echo "namespace $ANA2_NSID path I/O counters moved: ${moved[*]:-none}" >&2
  [ "${#moved[@]}" = 1 ] && echo "${moved[0]}"
}
# ana_log_state CTRL GRPID: the state nvme-cli's ana-log of CTRL gives group
# GRPID, and its NSIDs ("optimized 1 3").
ana_log_state() {
  nvme ana-log "/dev/$1" 2>/dev/null | awk -v g="$2" '
    $1 == "grpid" { in_g = ($3 == g) }
    in_g && $1 == "state" { st = $3 }
    in_g && $1 == "nsid" { ns = ns " " $3 }
    END { if (st != "") print st ns }'
}
# pattern MIB: MIB MiB of 512-byte blocks that carry their own number.
pattern() {
  awk -v n=$(($1 * 2048)) 'BEGIN { for (i = 0; i < n; i++) printf "kpeer-pattern blk %08d %0484d\n", i, i }'
}

step "nvme_$TRTYPE, native multipath"
if [ "$TRTYPE" = rdma ]; then
  # shellcheck source=/dev/null
  . "${KPEER_LIB:-/share/.kpeer/lib}/rxe-up.sh" || abort "rxe setup"
fi
modprobe "nvme_$TRTYPE" || abort "modprobe nvme_$TRTYPE"
mp=$(cat /sys/module/nvme_core/parameters/multipath 2>/dev/null)
[ "$mp" = Y ] && pass "native NVMe multipath on (nvme_core multipath=$mp)" || abort "nvme_core multipath=$mp"
mkdir -p /etc/nvme
echo "$HOSTNQN" > /etc/nvme/hostnqn
echo "$HOSTID" > /etc/nvme/hostid
# The kernel's ANA messages are dev_dbg: turn them on where dynamic debug is.
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug 2>/dev/null
DYNDBG=0
echo 'file multipath.c +p' > /sys/kernel/debug/dynamic_debug/control 2>/dev/null &&
  DYNDBG=1 && info "dynamic debug on for drivers/nvme/host/multipath.c (the kernel's \"ANA group N: state.\" lines)"

step "paths: discover and connect ${ADDRS[*]}"
for a in "${ADDRS[@]}"; do
  ok=0
  for i in $(seq "$DISCOVER_TRIES"); do
    if out=$(nvme discover -t "$TRTYPE" -a "$a" -s "$TRSVCID" 2>&1) && grep -q "subnqn: *$NQN" <<< "$out"; then ok=1; break; fi
    echo "$a attempt $i: ${out##*$'\n'}"
    sleep 3
  done
  [ "$ok" = 1 ] && pass "discover $a: $NQN listed" || abort "discover $a"
done
for a in "${ADDRS[@]}"; do
  run nvme connect -t "$TRTYPE" -n "$NQN" -a "$a" -s "$TRSVCID" -c 1 -l 600 -k 5 || abort "connect $a"
done
for _ in $(seq 100); do
  n=0
  for i in "${!ADDRS[@]}"; do
    c=$(ctrl_at "${ADDRS[$i]}") && p=$(path_of "$c" 1) && { CTRL[$i]=$c; PATHDEV[$i]=$p; n=$((n + 1)); }
  done
  HEAD=$(head_of 1) && [ "$n" = "${#ADDRS[@]}" ] && break
  sleep 0.1
done
[ -n "${HEAD:-}" ] || abort "no head device for namespace 1 of $NQN"
[ "$n" = "${#ADDRS[@]}" ] || abort "only $n of ${#ADDRS[@]} paths to namespace 1"
for i in "${!ADDRS[@]}"; do
  c=${CTRL[$i]}
  echo "path $((i + 1)): ${ADDRS[$i]} -> $c (cntlid $(cat "/sys/class/nvme/$c/cntlid"), $(cstate "$c")), path device ${PATHDEV[$i]}"
done
subsyses=$(for c in "${CTRL[@]}"; do ls -d /sys/class/nvme-subsystem/*/"$c" 2>/dev/null | cut -d/ -f5; done | sort -u)
[ "$(wc -w <<< "$subsyses")" = 1 ] && pass "one subsystem ($subsyses) holds the ${#CTRL[@]} controllers" ||
  failc "controllers in subsystems: $subsyses"
cntlids=$(for c in "${CTRL[@]}"; do cat "/sys/class/nvme/$c/cntlid"; done | sort -u | wc -l)
[ "$cntlids" = "${#CTRL[@]}" ] && pass "distinct cntlids: $(for c in "${CTRL[@]}"; do cat "/sys/class/nvme/$c/cntlid"; done | xargs)" || failc "cntlids not distinct"
pass "namespace 1: one head /dev/$HEAD, paths ${PATHDEV[*]}"
run nvme list-subsys
run nvme list-subsys "/dev/$HEAD"
live=$(nvme list-subsys "/dev/$HEAD" 2>/dev/null | grep -c ' live')
[ "$live" = "${#ADDRS[@]}" ] && pass "nvme list-subsys: ${#ADDRS[@]} live paths" || failc "nvme list-subsys: $live live paths, want ${#ADDRS[@]}"
run nvme list
echo "iopolicy: $(cat "/sys/class/nvme-subsystem/$subsyses/iopolicy" 2>/dev/null)"

ACTIVE=0
if [ "$ANA" = 1 ]; then
  step "ana: per-path ANA states"
  for i in "${!CTRL[@]}"; do echo "${PATHDEV[$i]}: ana_grpid $(cat "/sys/class/nvme/${CTRL[$i]}/${PATHDEV[$i]}/ana_grpid" 2>/dev/null) ana_state $(ana_of "$i")"; done
  ok=1
  wait_ana 0 optimized || ok=0
  for i in "${!CTRL[@]}"; do [ "$i" = 0 ] || wait_ana "$i" non-optimized || ok=0; done
  [ "$ok" = 1 ] && pass "ana_state: ${PATHDEV[0]} optimized, the others non-optimized" || failc "ana_state: $(for i in "${!CTRL[@]}"; do ana_of "$i"; done | xargs)"
  out=$(nvme list-subsys "/dev/$HEAD" 2>&1)
  grep -q ' live optimized' <<< "$out" && grep -q ' live non-optimized' <<< "$out" &&
    pass "nvme list-subsys shows one optimized and one non-optimized path" || failc "nvme list-subsys ANA states: $out"
  p=$(busy_path)
  [ "$p" = 0 ] && pass "I/O goes to the optimized path ${PATHDEV[0]}" || failc "I/O on path '${p}', want ${PATHDEV[0]}"
  if [ -n "$ANA2_NSID" ]; then
    step "ana2: namespace $ANA2_NSID in ANA group 2 (optimized on gateway 2)"
    for i in "${!CTRL[@]}"; do PATH2[$i]=$(path_of "${CTRL[$i]}" "$ANA2_NSID") || failc "no path to namespace $ANA2_NSID through ${CTRL[$i]}"; done
    g=$(for i in "${!CTRL[@]}"; do cat "/sys/class/nvme/${CTRL[$i]}/${PATH2[$i]}/ana_grpid" 2>/dev/null; done | sort -u | xargs)
    [ "$g" = 2 ] && pass "namespace $ANA2_NSID: ana_grpid 2 on every path" || failc "namespace $ANA2_NSID: ana_grpid '$g'"
    for _ in $(seq 600); do [ "$(ana2_of 1)" = optimized ] && [ "$(ana2_of 0)" = non-optimized ] && break; sleep 0.1; done
    [ "$(ana2_of 1)" = optimized ] && [ "$(ana2_of 0)" = non-optimized ] &&
      pass "namespace $ANA2_NSID: ${PATH2[1]} optimized, ${PATH2[0]} non-optimized" ||
      failc "namespace $ANA2_NSID: ${PATH2[0]} $(ana2_of 0), ${PATH2[1]} $(ana2_of 1)"
    p=$(busy_path2)
    [ "$p" = 1 ] && pass "I/O to namespace $ANA2_NSID goes to gateway 2 (${PATH2[1]}) while namespace 1's goes to gateway 1" ||
      failc "namespace $ANA2_NSID I/O on path '${p}', want ${PATH2[1]}"
    run nvme ana-log "/dev/${CTRL[0]}"
    a1=$(ana_log_state "${CTRL[0]}" 1) a2=$(ana_log_state "${CTRL[0]}" 2)
    b1=$(ana_log_state "${CTRL[1]}" 1) b2=$(ana_log_state "${CTRL[1]}" 2)
    ns1=$(nvme list-ns "/dev/${CTRL[0]}" 2>/dev/null | sed -n 's/.*:0x\([0-9a-f]*\).*/\1/p' |
      while read -r h; do n=$((16#$h)); [ "$n" != "$ANA2_NSID" ] && printf ' %s' "$n"; done)
    if [ "$a1" = "optimized$ns1" ] && [ "$a2" = "non-optimized $ANA2_NSID" ] && [ "$b1" = "non-optimized$ns1" ] && [ "$b2" = "optimized $ANA2_NSID" ]; then
      pass "nvme ana-log: gateway 1 group 1 '$a1', group 2 '$a2'; gateway 2 group 1 '$b1', group 2 '$b2'"
    else
      failc "nvme ana-log: gateway 1 group 1 '$a1', group 2 '$a2'; gateway 2 group 1 '$b1', group 2 '$b2' (group 1 NSIDs:$ns1)"
    fi
  fi
  step "ana: reload swaps the states (gateway 1 non-optimized, gateway 2 optimized)"
  d0=$(dmesg | wc -l)
  gw HUP 1 gw1-b && gw HUP 2 gw2-b || failc "reload to the swapped states"
  if wait_ana 0 non-optimized && wait_ana 1 optimized; then
    pass "after the reload: ${PATHDEV[0]} $(ana_of 0), ${PATHDEV[1]} $(ana_of 1)"
  else
    failc "after the reload: ${PATHDEV[0]} $(ana_of 0), ${PATHDEV[1]} $(ana_of 1)"
  fi
  dmesg | tail -n +"$((d0 + 1))" | grep -iE 'ana|nvme' | tail -n 10
  ana_log=$(dmesg | tail -n +"$((d0 + 1))" | grep -E 'ANA group [0-9]+: ' | sed 's/^\[[^]]*\] //' | xargs -d '\n' | head -c 300)
  if [ -n "$ana_log" ]; then
    pass "the kernel logged the ANA change: $ana_log"
  elif [ "$DYNDBG" = 1 ]; then
    failc "no \"ANA group\" line in dmesg after the reload"
  else
    info "no ANA line in dmesg (the kernel's ANA messages are dev_dbg and dynamic debug is off)"
  fi
  run nvme list-subsys "/dev/$HEAD"
  p=$(busy_path)
  [ "$p" = 1 ] && pass "the ANA change moved the I/O to ${PATHDEV[1]}" || failc "I/O on path '${p}' after the ANA change, want ${PATHDEV[1]}"
  if [ -n "$ANA2_NSID" ]; then
    [ "$(ana2_of 1)" = optimized ] && [ "$(ana2_of 0)" = non-optimized ] &&
      pass "group 2 unchanged by the group 1 reload" || failc "group 2 after the reload: ${PATH2[0]} $(ana2_of 0), ${PATH2[1]} $(ana2_of 1)"
  fi
  step "ana: reload back (gateway 1 optimized)"
  gw HUP 1 gw1-a && gw HUP 2 gw2-a || failc "reload back"
  if wait_ana 0 optimized && wait_ana 1 non-optimized; then
    p=$(busy_path)
    [ "$p" = 0 ] && pass "states back: I/O on ${PATHDEV[0]} again" || failc "I/O on path '${p}' after the change back"
  else
    failc "after the reload back: ${PATHDEV[0]} $(ana_of 0), ${PATHDEV[1]} $(ana_of 1)"
  fi
fi

step "pattern: ${IO_MB} MiB at offset 0 of /dev/$HEAD"
pattern "$IO_MB" > /tmp/pat.bin
if dd if=/tmp/pat.bin of="/dev/$HEAD" bs=64k oflag=direct conv=fsync status=none &&
   dd if="/dev/$HEAD" of=/tmp/back.bin bs=64k count=$((IO_MB * 16)) iflag=direct status=none &&
   cmp /tmp/pat.bin /tmp/back.bin; then
  pass "pattern written and read back (${IO_MB} MiB)"
else
  failc "pattern write/read-back"
fi

step "failover: fio verify loop while the gateway carrying the I/O is killed"
ACTIVE=$(busy_path)
[ -n "$ACTIVE" ] || { failc "no single path carries the I/O"; ACTIVE=0; }
OTHER=$(( (ACTIVE + 1) % ${#CTRL[@]} ))
echo "active path: ${PATHDEV[$ACTIVE]} (gateway $((ACTIVE + 1)), ${ADDRS[$ACTIVE]}); other: ${PATHDEV[$OTHER]}"
(prev=""; while :; do
   s=$(for c in "${CTRL[@]}"; do printf '%s=%s ' "$c" "$(cstate "$c")"; done)
   [ "$s" != "$prev" ] && echo "$(ts) $s" >> /tmp/states
   prev=$s; sleep 0.1
 done) &
MONPID=$!
rm -f /tmp/fio-stop /tmp/fio.rcs
dmesg_before=$(dmesg | wc -l)
reconn_before=$(dmesg | grep -c 'Successfully reconnected')
(k=0; while [ ! -e /tmp/fio-stop ]; do
   k=$((k + 1))
   fio --name=gw-verify --filename="/dev/$HEAD" --direct=1 --ioengine=libaio --iodepth=8 \
     --rw=randwrite --bsrange=4k-64k --offset=16M --size="${FIO_MB}M" --randseed=$k \
     --verify=crc32c --do_verify=1 --verify_fatal=1 --output-format=terse > "/tmp/fio.$k.out" 2>&1
   echo "$k $?" >> /tmp/fio.rcs
 done) &
FIOPID=$!
before=$(ios "$ACTIVE")
for _ in $(seq 300); do [ "$(ios "$ACTIVE")" -gt "$before" ] && break; sleep 0.1; done
echo "fio running: ${PATHDEV[$ACTIVE]} counters $before -> $(ios "$ACTIVE")"
gw KILL $((ACTIVE + 1)) || failc "kill gateway $((ACTIVE + 1))"
t0=$(ts)
gone=0
for _ in $(seq 600); do [ "$(cstate "${CTRL[$ACTIVE]}")" != live ] && { gone=1; break; }; sleep 0.1; done
[ "$gone" = 1 ] && pass "the kernel reports the path gone: ${CTRL[$ACTIVE]} $(cstate "${CTRL[$ACTIVE]}") $(awk -v a="$t0" -v b="$(ts)" 'BEGIN { printf "%.1f", b - a }') s after SIGKILL" ||
  failc "${CTRL[$ACTIVE]} still live 60 s after SIGKILL of its gateway"
other_before=$(ios "$OTHER")
moved=0
for _ in $(seq 600); do [ "$(ios "$OTHER")" -gt "$((other_before + 20))" ] && { moved=1; break; }; sleep 0.1; done
[ "$moved" = 1 ] && pass "I/O moved to ${PATHDEV[$OTHER]} (counters $other_before -> $(ios "$OTHER")) while ${CTRL[$ACTIVE]} is $(cstate "${CTRL[$ACTIVE]}")" ||
  failc "no I/O on ${PATHDEV[$OTHER]} within 60 s of the path loss"
gw START $((ACTIVE + 1)) || failc "start gateway $((ACTIVE + 1))"
t0=$(ts)
back=0
for _ in $(seq $((RECONNECT_WAIT_S * 10))); do
  [ "$(cstate "${CTRL[$ACTIVE]}")" = live ] && [ "$(dmesg | grep -c 'Successfully reconnected')" -gt "$reconn_before" ] && { back=1; break; }
  sleep 0.1
done
[ "$back" = 1 ] && pass "the path came back: ${CTRL[$ACTIVE]} live $(awk -v a="$t0" -v b="$(ts)" 'BEGIN { printf "%.1f", b - a }') s after the restart ($(dmesg | grep 'Successfully reconnected' | tail -n1 | sed 's/^\[[^]]*\] //'))" ||
  failc "${CTRL[$ACTIVE]} not live within ${RECONNECT_WAIT_S} s of the restart ($(cstate "${CTRL[$ACTIVE]}"))"
# one more full fio run after the path is back
n0=$(wc -l < /tmp/fio.rcs 2>/dev/null || echo 0)
for _ in $(seq 1200); do [ "$(wc -l < /tmp/fio.rcs 2>/dev/null || echo 0)" -ge $((n0 + 2)) ] && break; sleep 0.1; done
touch /tmp/fio-stop
# The loop ends with its current fio run (seconds) unless the I/O hangs:
# then say what the guest and the gateways (their goroutines) were doing,
# instead of waiting for the run's timeout.
for _ in $(seq $((FIO_WAIT_S * 10))); do kill -0 "$FIOPID" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$FIOPID" 2>/dev/null; then
  failc "fio still running ${FIO_WAIT_S} s after the stop request: the I/O hangs"
  hang_report
  exit 1
fi
wait "$FIOPID"
FIOPID=""
kill "$MONPID" 2>/dev/null; MONPID=""
echo "controller states:"; cat /tmp/states
echo "fio runs (run status):"; cat /tmp/fio.rcs
bad=$(awk '$2 != 0' /tmp/fio.rcs | wc -l)
runs=$(wc -l < /tmp/fio.rcs)
for f in /tmp/fio.*.out; do grep -v '^3;fio-' "$f" | grep -iE 'error|verify|bad' | head -n 5; done
[ "$bad" = 0 ] && [ "$runs" -ge 2 ] && pass "fio verify across the failover: $runs runs of ${FIO_MB} MiB, all passed (no I/O error, no verify error)" ||
  failc "fio across the failover: $bad of $runs runs failed"
dmesg | tail -n +"$((dmesg_before + 1))" | grep -iE 'nvme|rdma' | tail -n 30
if dmesg | tail -n +"$((dmesg_before + 1))" | grep -E "I/O error, dev $HEAD|Buffer I/O error on dev $HEAD"; then
  failc "the kernel logged I/O errors on /dev/$HEAD"
else
  pass "no I/O error logged on /dev/$HEAD"
fi
p=$(busy_path)
info "after the failback the I/O is on path '${p}' (${PATHDEV[${p:-0}]})"
run nvme list-subsys "/dev/$HEAD"

if [ -n "$FS_NSID" ]; then
  step "fs: ext4 on namespace $FS_NSID"
  FSDEV=$(head_of "$FS_NSID") || abort "no head device for namespace $FS_NSID"
  if mkfs.ext4 -q -F "/dev/$FSDEV" && mount "/dev/$FSDEV" /mnt; then
    for k in 1 2 3; do head -c $((k * 700000)) /dev/urandom > "/mnt/file$k"; done
    cp /usr/bin/fio /mnt/fio.bin
    (cd /mnt && sha256sum file1 file2 file3 fio.bin) > /tmp/sums
    umount /mnt
    if mount "/dev/$FSDEV" /mnt && (cd /mnt && sha256sum -c /tmp/sums) && umount /mnt && fsck.ext4 -n -f "/dev/$FSDEV"; then
      pass "ext4 on /dev/$FSDEV: mkfs, mount, 4 files, umount, mount, checksums match, fsck clean"
    else
      failc "ext4 checksums or fsck on /dev/$FSDEV"
    fi
    mountpoint -q /mnt && umount /mnt
    echo "$(sha256sum < "/dev/$FSDEV" | cut -d' ' -f1) $(blockdev --getsize64 "/dev/$FSDEV")" > "$OUT/fs.sha256"
    echo "whole namespace: $(cat "$OUT/fs.sha256")"
  else
    failc "mkfs.ext4 or mount /dev/$FSDEV"
  fi
fi

step "pattern read back after everything"
if dd if="/dev/$HEAD" of=/tmp/back.bin bs=64k count=$((IO_MB * 16)) iflag=direct status=none && cmp /tmp/pat.bin /tmp/back.bin; then
  pass "pattern at offset 0 intact"
else
  failc "pattern at offset 0 differs"
fi
step "disconnect"
run nvme disconnect -n "$NQN" || failc "disconnect"
exit 0
