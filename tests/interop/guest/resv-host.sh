#!/bin/bash
# resv-host.sh - NVMe persistent reservations between two Linux kernel hosts
# (nvme-rdma over rxe, nvme-cli's resv-* commands) on one nvmetd namespace
# (tests/interop/resv_test.go). Run as guest a and guest b of one
# kernel-peer session; each connects with its own host NQN and host ID
# (HOSTID_A, HOSTID_B) and they take turns through markers in $KPEER_SIGNAL:
#
#   a: register key KEY_A, Persist Through Power Loss on    -> a-registered
#   b: register key KEY_B                                   -> b-registered
#   a: acquire Write Exclusive; a write succeeds            -> a-holds
#   b: report (2 registrants, a holds WE, PTPLS 1); acquire fails;
#      a write gets Reservation Conflict, a read succeeds   -> b-checked
#   a: release with the wrong type fails; release           -> a-released
#   b: a write succeeds; report shows no reservation        -> b-wrote
#   a: acquire WE again                                     -> a-holds-2
#   b: preempt a (PRKEY=KEY_A); report: b holds, a is gone;
#      b writes                                             -> b-preempted
#   a: the notification log holds Registration Preempted;
#      a write gets Reservation Conflict, a read succeeds;
#      a release with its old key fails                     -> a-checked
#   b: has nvmetd killed (SIGKILL) and restarted (host/nvmetd-restart.sh);
#      once the kernel reconnected, the report is the same (PTPL)
#                                                           -> b-restarted
#   a: a write still gets Reservation Conflict              -> a-checked-2
#   b: clear; report: no registrants                        -> b-cleared
#   a: a write succeeds; done                               -> a-done
#
# env: NQN HOSTID_A HOSTID_B (required); TARGET_ADDR=$KPEER_HOST_ADDR
#      TRSVCID=4420 DISCOVER_TRIES=20 WAIT_S=300 KEY_A=0xaaaa KEY_B=0xbbbb
#      RESCAP=0xff
# Prints PASS:/FAIL: lines and "RESULT: PASS|FAIL"; exits non-zero on failure.
set -u
TARGET_ADDR="${TARGET_ADDR:-${KPEER_HOST_ADDR:-192.0.2.1}}"
TRSVCID="${TRSVCID:-4420}"
NQN="${NQN:?}"
DISCOVER_TRIES="${DISCOVER_TRIES:-20}"
WAIT_S="${WAIT_S:-300}"
KEY_A="${KEY_A:-0xaaaa}" KEY_B="${KEY_B:-0xbbbb}"
RESCAP="${RESCAP:-0xff}" # the six types, IEKEY, PTPL (0xfe without resv_ptpl_file)
SIGNAL="${KPEER_SIGNAL:-/tmp/kpeer-signal}"
ME="${KPEER_GUEST:?}"
case "$ME" in
  a) HOSTID="${HOSTID_A:?}" KEY=$KEY_A ;;
  b) HOSTID="${HOSTID_B:?}" KEY=$KEY_B ;;
  *) echo "KPEER_GUEST=$ME: want a or b"; exit 2 ;;
esac
HOSTNQN="nqn.2014-08.org.nvmexpress:uuid:$HOSTID"
mkdir -p "$SIGNAL"
NFAIL=0
CTRL="" NSDEV=""

step() { echo; echo "=== $ME: $* [t=$(cut -d' ' -f1 /proc/uptime)s]"; }
pass() { echo "PASS: $ME: $*"; }
failc() { echo "FAIL: $ME: $*"; NFAIL=$((NFAIL + 1)); }
abort() { failc "$*"; printf '%s\n' "$ME: $*" > "$SIGNAL/abort"; exit 1; }
run() { echo "\$ $*"; "$@"; }
finish() {
  local rc=$?
  if [ "$rc" != 0 ] && [ "$NFAIL" = 0 ]; then
    failc "script exited with status $rc"
  fi
  [ "$NFAIL" = 0 ] || [ -e "$SIGNAL/abort" ] || printf '%s\n' "$ME failed" > "$SIGNAL/abort"
  [ -n "$CTRL" ] && nvme disconnect -n "$NQN" >/dev/null 2>&1
  echo
  echo "=== dmesg (nvme)"
  dmesg | grep -iE 'nvme' | tail -n 30
  if [ "$NFAIL" = 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL ($NFAIL failed checks)"; fi
  [ "$NFAIL" = 0 ]
  exit $?
}
trap finish EXIT
put_signal() {
  printf '%s\n' "$(cut -d' ' -f1 /proc/uptime)" > "$SIGNAL/$1.tmp" && mv "$SIGNAL/$1.tmp" "$SIGNAL/$1"
}
wait_signal() {
  local end=$(( $(date +%s) + WAIT_S ))
  step "waiting for $1"
  while [ ! -e "$SIGNAL/$1" ]; do
    [ -e "$SIGNAL/abort" ] && { echo "the other side gave up: $(cat "$SIGNAL/abort")"; NFAIL=$((NFAIL + 1)); exit 1; }
    [ "$(date +%s)" -ge "$end" ] && abort "no $1 within ${WAIT_S}s"
    sleep 0.2
  done
}

# ok DESC CMD...: CMD must succeed. bad DESC PATTERN CMD...: CMD must fail
# and print PATTERN (case-insensitive).
ok() {
  local desc=$1 out; shift
  echo "\$ $*"
  if out=$("$@" 2>&1); then echo "$out"; pass "$desc"; else echo "$out"; failc "$desc (exit $?)"; fi
}
bad() {
  local desc=$1 pat=$2 out rc; shift 2
  echo "\$ $*"
  out=$("$@" 2>&1); rc=$?
  echo "$out"
  if [ "$rc" != 0 ] && grep -qi -- "$pat" <<< "$out"; then pass "$desc"; else failc "$desc (exit $rc, want failure with \"$pat\")"; fi
}

# report: nvme resv-report with the extended data structure (nvme-cli 2.3
# calls it --cdw11=1, later versions --eds), output in $REPORT.
REPORT=""
report() {
  local eds=--cdw11=1
  nvme resv-report --help 2>&1 | grep -q -- '--eds' && eds=--eds
  echo "\$ nvme resv-report /dev/$NSDEV $eds"
  REPORT=$(nvme resv-report "/dev/$NSDEV" $eds 2>&1) || failc "resv-report: $REPORT"
  echo "$REPORT"
}
# field NAME: a top-level field of $REPORT ("rtype", "regctl", "gen").
field() { awk -v f="$1" '$1 == f && $2 == ":" { print $3; exit }' <<< "$REPORT"; }
# holder_key: the rkey of the registrant with rcsts 1 (nvme-cli prints
# keys in hex without 0x).
holder_key() {
  awk '$1 == "rcsts" { r = $3 } $1 == "rkey" { if (r == 1) { print $3; exit } }' <<< "$REPORT"
}
expect_report() { # RTYPE REGCTL [HOLDER_KEY]
  report
  local rt rc hk
  rt=$(field rtype) rc=$(field regctl) hk=$(holder_key)
  if [ "$rt" = "$1" ] && [ "$rc" = "$2" ] && { [ -z "${3:-}" ] || [ "$((16#${hk:-0}))" = "$(($3))" ]; }; then
    pass "report: rtype $rt, regctl $rc${3:+, holder key $hk}"
  else
    failc "report: rtype $rt regctl $rc holder key $hk, want $1 $2 ${3:-}"
  fi
}
# write / read: one 4 KiB direct I/O at offset 1 MiB through the block layer.
write_blk() { dd if=/tmp/blk of="/dev/$NSDEV" bs=4k seek=256 count=1 oflag=direct conv=notrunc status=none 2>&1; }
read_blk() { dd if="/dev/$NSDEV" of=/dev/null bs=4k skip=256 count=1 iflag=direct status=none 2>&1; }
expect_write() {
  local out
  if out=$(write_blk); then pass "write allowed"; else failc "write refused: $out"; fi
}
expect_write_conflict() {
  local out
  if out=$(write_blk); then
    failc "write succeeded, want Reservation Conflict"
  else
    echo "$out"
    # Linux maps Reservation Conflict to BLK_STS_NEXUS (EBADE, "Invalid
    # exchange") and logs the status (sc 0x83).
    if grep -qi 'invalid exchange' <<< "$out" || dmesg | tail -n 20 | grep -qiE 'reservation conflict|sc 0x83'; then
      pass "write refused with Reservation Conflict ($out)"
    else
      dmesg | tail -n 5
      failc "write refused, but no Reservation Conflict in the kernel log"
    fi
  fi
}
expect_read() {
  local out
  if out=$(read_blk); then pass "read allowed"; else failc "read refused: $out"; fi
}

step "rxe"
. "${KPEER_LIB:-/share/.kpeer/lib}/rxe-up.sh" || abort "rxe setup"
modprobe nvme_rdma || abort "modprobe nvme_rdma"
echo "$HOSTNQN" > /etc/nvme/hostnqn 2>/dev/null || { mkdir -p /etc/nvme && echo "$HOSTNQN" > /etc/nvme/hostnqn; }
echo "$HOSTID" > /etc/nvme/hostid
head -c 4096 /dev/urandom > /tmp/blk

step "connect as $HOSTNQN"
ok=0
for i in $(seq "$DISCOVER_TRIES"); do
  if out=$(nvme discover -t rdma -a "$TARGET_ADDR" -s "$TRSVCID" --hostnqn="$HOSTNQN" --hostid="$HOSTID" 2>&1); then ok=1; break; fi
  echo "attempt $i: $out"
  sleep 3
done
[ "$ok" = 1 ] || abort "discover: $out"
run nvme connect -t rdma -n "$NQN" -a "$TARGET_ADDR" -s "$TRSVCID" --hostnqn="$HOSTNQN" --hostid="$HOSTID" || abort "connect"
for _ in $(seq 100); do
  for c in /sys/class/nvme/nvme*; do
    [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$NQN" ] && CTRL=$(basename "$c")
  done
  for b in /sys/block/nvme*; do
    [[ "$(basename "$b")" =~ ^nvme[0-9]+n[0-9]+$ ]] || continue
    [ "$(cat "$b/device/subsysnqn" 2>/dev/null)" = "$NQN" ] && NSDEV=$(basename "$b")
  done
  [ -n "$CTRL" ] && [ -n "$NSDEV" ] && [ -b "/dev/$NSDEV" ] && break
  sleep 0.1
done
[ -n "$CTRL" ] && [ -n "$NSDEV" ] || abort "no controller or namespace for $NQN"
pass "connected: /dev/$CTRL, /dev/$NSDEV, hostid $(cat /sys/class/nvme/$CTRL/hostid 2>/dev/null)"
[ "$(cat /sys/class/nvme/$CTRL/hostid 2>/dev/null)" = "$HOSTID" ] || failc "controller hostid $(cat /sys/class/nvme/$CTRL/hostid 2>/dev/null), want $HOSTID"

step "capabilities"
oncs=$(nvme id-ctrl "/dev/$CTRL" | awk '$1 == "oncs" { print $3 }')
rescap=$(nvme id-ns "/dev/$NSDEV" | awk '$1 == "rescap" { print $3 }')
[ $((oncs & 0x20)) != 0 ] && pass "ONCS $oncs: reservations" || failc "ONCS $oncs: no reservations bit"
[ "$((rescap))" = $((RESCAP)) ] && pass "RESCAP $rescap" || failc "RESCAP $rescap, want $RESCAP"

if [ "$ME" = a ]; then
  step "register $KEY"
  ok "register with PTPL" nvme resv-register "/dev/$NSDEV" --nrkey="$KEY" --rrega=0 --cptpl=3
  put_signal a-registered
  wait_signal b-registered
  step "acquire Write Exclusive"
  ok "acquire WE" nvme resv-acquire "/dev/$NSDEV" --crkey="$KEY" --rtype=1 --racqa=0
  expect_report 1 2 "$KEY"
  expect_write
  put_signal a-holds

  wait_signal b-checked
  step "release"
  bad "release with the wrong type" "invalid.field" nvme resv-release "/dev/$NSDEV" --crkey="$KEY" --rtype=2 --rrela=0
  ok "release" nvme resv-release "/dev/$NSDEV" --crkey="$KEY" --rtype=1 --rrela=0
  put_signal a-released

  wait_signal b-wrote
  step "acquire Write Exclusive again"
  # Drain notifications so far (none expected for Write Exclusive).
  nvme get-log "/dev/$CTRL" --log-id=0x80 --log-len=64 -b > /tmp/rn0 2>/dev/null
  ok "acquire WE again" nvme resv-acquire "/dev/$NSDEV" --crkey="$KEY" --rtype=1 --racqa=0
  put_signal a-holds-2

  wait_signal b-preempted
  step "preempted by b"
  if nvme get-log "/dev/$CTRL" --log-id=0x80 --log-len=64 -b > /tmp/rn 2>/dev/null; then
    typ=$(od -An -tu1 -j8 -N1 /tmp/rn | tr -d ' ')
    nsid=$(od -An -tu4 -j12 -N4 /tmp/rn | tr -d ' ')
    cnt=$(od -An -tu8 -j0 -N8 /tmp/rn | tr -d ' ')
    if [ "$typ" = 1 ] && [ "$nsid" = 1 ] && [ "$cnt" != 0 ]; then
      pass "notification log: Registration Preempted, nsid $nsid, count $cnt"
    else
      od -An -tx1 /tmp/rn
      failc "notification log: type $typ nsid $nsid count $cnt, want 1 (Registration Preempted) on nsid 1"
    fi
  else
    failc "get-log 0x80"
  fi
  expect_report 1 1 "$KEY_B"
  expect_write_conflict
  expect_read
  bad "release with the preempted key" "reservation.conflict" nvme resv-release "/dev/$NSDEV" --crkey="$KEY" --rtype=1 --rrela=0
  put_signal a-checked

  wait_signal b-restarted
  step "after nvmetd's restart"
  expect_write_conflict
  put_signal a-checked-2

  wait_signal b-cleared
  step "after the clear"
  expect_write
  put_signal a-done
else
  wait_signal a-registered
  step "register $KEY"
  ok "register" nvme resv-register "/dev/$NSDEV" --nrkey="$KEY" --rrega=0
  bad "register again with another key" "reservation.conflict" nvme resv-register "/dev/$NSDEV" --nrkey=0x1234 --rrega=0
  put_signal b-registered

  wait_signal a-holds
  step "a holds Write Exclusive"
  expect_report 1 2 "$KEY_A"
  [ "$(field ptpls)" = 1 ] && pass "report: ptpls 1" || failc "report: ptpls $(field ptpls), want 1"
  bad "acquire while a holds it" "reservation.conflict" nvme resv-acquire "/dev/$NSDEV" --crkey="$KEY" --rtype=1 --racqa=0
  bad "acquire with a's key" "reservation.conflict" nvme resv-acquire "/dev/$NSDEV" --crkey="$KEY_A" --rtype=1 --racqa=0
  expect_write_conflict
  expect_read
  put_signal b-checked

  wait_signal a-released
  step "a released"
  expect_report 0 2
  expect_write
  put_signal b-wrote

  wait_signal a-holds-2
  step "preempt a"
  ok "preempt" nvme resv-acquire "/dev/$NSDEV" --crkey="$KEY" --prkey="$KEY_A" --rtype=1 --racqa=1
  expect_report 1 1 "$KEY"
  expect_write
  put_signal b-preempted

  wait_signal a-checked
  step "nvmetd killed and restarted: the reservation persists"
  printf 'KILL\n' > "$SIGNAL/restart-target.tmp" && mv "$SIGNAL/restart-target.tmp" "$SIGNAL/restart-target"
  wait_signal target-restarted-1
  end=$(( $(date +%s) + 120 ))
  until nvme resv-report "/dev/$NSDEV" --eds >/dev/null 2>&1; do
    [ "$(date +%s)" -ge "$end" ] && { failc "no reconnection within 120 s"; break; }
    sleep 1
  done
  expect_report 1 1 "$KEY"
  [ "$(field ptpls)" = 1 ] && pass "report after the restart: ptpls 1" || failc "report after the restart: ptpls $(field ptpls)"
  put_signal b-restarted
  wait_signal a-checked-2
  step "clear"
  ok "clear" nvme resv-release "/dev/$NSDEV" --crkey="$KEY" --rrela=1
  expect_report 0 0
  put_signal b-cleared
  wait_signal a-done
fi
