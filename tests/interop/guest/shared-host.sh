#!/bin/bash
# shared-host.sh - our nvmeof (static build, soft RoCEv2) in a 6.12 guest
# connects two subsystems of nvmetd (host side, 192.0.2.1) from the guest's
# one address: two connection daemons, whose soft RoCE devices share UDP 4791
# there (rdma/soft Config.Share). The first namespace is mapped with ublk, the
# second with NBD; each gets a 4 MiB pattern written with O_DIRECT and read
# back. The ublk daemon is then SIGKILLed: the NBD disk keeps working, the
# ublk disk goes and `nvmeof list` cleans its stopped device up; the first
# subsystem connects again from the same address and reads its pattern back;
# disconnect-all leaves no daemon. The host checks the backing files.
#
# env: TARGET_ADDR=$KPEER_HOST_ADDR TRSVCID=4420 NQN1 NQN2 (required) KATO=30
# Prints PASS:/FAIL:/INFO: lines and "RESULT: PASS|FAIL".
set -u
# shellcheck source=/dev/null
. "${INTEROP:-/share/interop}/guest/lib.sh"
TARGET_ADDR="${TARGET_ADDR:-${KPEER_HOST_ADDR:-192.0.2.1}}"
TRSVCID="${TRSVCID:-4420}"
KATO="${KATO:-30}"
MYADDR="${KPEER_IP:-192.0.2.2}"
RUNDIR=/run/nvmeof

finish() {
  for f in "$RUNDIR"/nvmeof*.log; do
    [ -e "$f" ] && cp "$f" "$OUT/$(basename "$f")" 2>/dev/null
  done
  timeout 60 nvmeof disconnect-all >/dev/null 2>&1
  touch "$SIGNAL/release"
  if [ "$NFAIL" = 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL ($NFAIL failed checks)"; fi
  [ "$NFAIL" = 0 ]
  exit $?
}
trap finish EXIT

# connect NQN MAP: connect from $MYADDR with --map MAP; DEV is the disk printed.
connect() {
  local nqn=$1 map=$2 out
  step "nvmeof connect -n $nqn -w $MYADDR --map $map"
  if out=$(timeout 120 nvmeof connect -t rdma -a "$TARGET_ADDR" -s "$TRSVCID" -n "$nqn" -w "$MYADDR" -k "$KATO" --map "$map" 2>&1); then
    echo "$out"
    pass "connect $nqn --map $map from $MYADDR"
  else
    echo "$out"
    for f in "$RUNDIR"/nvmeof*.log; do [ -e "$f" ] && tail -n 30 "$f"; done
    abort "connect $nqn --map $map"
  fi
  DEV=$(grep -m1 -oE '^/dev/(ublkb|nbd)[0-9]+$' <<< "$out")
  [ -n "$DEV" ] && [ -b "$DEV" ] || abort "connect $nqn printed no block device"
}

# pattern N: 4 MiB naming namespace N, on stdout.
pattern() { yes "shared-address-ns$1-" | head -c $((4 << 20)); }

# write_check DEV N: write pattern N with O_DIRECT, read it back.
write_check() {
  local dev=$1 n=$2 want got
  want=$(pattern "$n" | sha256sum | cut -d' ' -f1)
  pattern "$n" | dd of="$dev" bs=1M oflag=direct status=none || { failc "write $dev"; return; }
  got=$(dd if="$dev" bs=1M count=4 iflag=direct status=none | sha256sum | cut -d' ' -f1)
  [ "$got" = "$want" ] && pass "$dev (ns$n): 4 MiB pattern read back" || failc "$dev (ns$n): read back $got, want $want"
}

# read_check DEV N: the pattern is there.
read_check() {
  local dev=$1 n=$2 want got
  want=$(pattern "$n" | sha256sum | cut -d' ' -f1)
  got=$(dd if="$dev" bs=1M count=4 iflag=direct status=none | sha256sum | cut -d' ' -f1)
  [ "$got" = "$want" ] && pass "$dev (ns$n): pattern still there" || failc "$dev (ns$n): read $got, want $want"
}

cd /tmp || abort "cd /tmp"
install_bins
command -v nvmeof >/dev/null || abort "no nvmeof in /share/bin"
modprobe ublk_drv || abort "modprobe ublk_drv"
modprobe nbd || abort "modprobe nbd"

ok=0
for i in $(seq 20); do
  if out=$(timeout 30 nvmeof discover -t rdma -a "$TARGET_ADDR" -s "$TRSVCID" -w "$MYADDR" 2>&1); then ok=1; break; fi
  echo "try $i: $(tail -n 1 <<< "$out")"; sleep 2
done
[ "$ok" = 1 ] || abort "discover"

connect "$NQN1" ublk
UDEV=$DEV
connect "$NQN2" nbd
NDEV=$DEV
[ "$UDEV" != "$NDEV" ] && pass "two disks: $UDEV $NDEV" || failc "one disk for two subsystems"
run nvmeof list
n=$(pgrep -c -x nvmeof)
[ "$n" = 2 ] && pass "two connection daemons" || failc "$n nvmeof processes, want 2"
write_check "$UDEV" 1
write_check "$NDEV" 2

step "SIGKILL of the ublk daemon"
pid=$(grep -l "\"$NQN1\"" "$RUNDIR"/nvmeof*/state.json | head -1 | xargs -r sed -n 's/.*"pid": *\([0-9]*\).*/\1/p' | head -1)
[ -n "$pid" ] || abort "no daemon pid for $NQN1"
run kill -KILL "$pid"
for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && failc "daemon $pid still alive" || pass "ublk daemon $pid gone"
read_check "$NDEV" 2
write_check "$NDEV" 2
run nvmeof list
id=${UDEV#/dev/ublkb}
for _ in $(seq 50); do [ -e "$UDEV" ] || [ -e "/dev/ublkc$id" ] || break; sleep 0.2; done
[ ! -e "$UDEV" ] && [ ! -e "/dev/ublkc$id" ] && pass "the killed daemon's ublk disk and device are gone" || failc "$UDEV or /dev/ublkc$id left after the kill"

connect "$NQN1" ublk
read_check "$DEV" 1
read_check "$NDEV" 2

step "disconnect-all"
run timeout 60 nvmeof disconnect-all && pass "disconnect-all" || failc "disconnect-all"
for _ in $(seq 50); do pgrep -x nvmeof >/dev/null || break; sleep 0.2; done
procs=$(pgrep -a -x nvmeof || true)
[ -z "$procs" ] && pass "no nvmeof process left" || { echo "$procs"; failc "nvmeof processes left"; }
