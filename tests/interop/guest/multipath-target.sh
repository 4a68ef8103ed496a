#!/bin/bash
# multipath-target.sh - the Linux kernel NVMe-oF target (nvmet, nvmet-rdma over
# rxe) with Asymmetric Namespace Access on two ports, for our initiator's
# native multipath (tests/interop/multipath_test.go, cmd/kpeer-mpath):
#   * one subsystem NQN with namespace 1 (null_blk, NS_SIZE_MB MiB) in ANA group 1;
#   * port 1 rdma TARGET_ADDR:4420 with group 1 optimized, port 2 rdma
#     TARGET_ADDR:4421 with group 1 non-optimized;
#   * then it carries out what the host asks through files in $KPEER_SIGNAL,
#     answering each with <name>.done:
#       ana-flip   port 1 inaccessible, port 2 optimized (nvmet sends ANA Change AENs)
#       ana-back   port 1 optimized, port 2 non-optimized
#       unlink-1   remove the subsystem's link from port 1 (its controllers are torn down)
#       relink-1   link it again
#   * at release, checks that the host left nothing behind (no RC QP on rxe0).
#
# env (defaults):
#   NQN=nqn.2014-08.org.nvmexpress:kpeer-mpath  TARGET_ADDR=$KPEER_IP
#   NS_SIZE_MB=64  NS_UUID=6b706565-7200-4000-8000-0000000000c1  TARGET_WAIT_S=900
# Exit: 0 ok, 1 setup failed, 3 timed out waiting, 4 aborted, 5 stale state left.
set -u
LIB="${KPEER_LIB:-$(cd "$(dirname "$0")" && pwd)}"
NQN="${NQN:-nqn.2014-08.org.nvmexpress:kpeer-mpath}"
TARGET_ADDR="${TARGET_ADDR:-${KPEER_IP:-192.0.2.2}}"
NS_SIZE_MB="${NS_SIZE_MB:-64}"
NS_UUID="${NS_UUID:-6b706565-7200-4000-8000-0000000000c1}"
TARGET_WAIT_S="${TARGET_WAIT_S:-900}"
SIGNAL="${KPEER_SIGNAL:-/tmp/kpeer-signal}"
mkdir -p "$SIGNAL"
CFG=/sys/kernel/config/nvmet
fail() { echo "FAIL: $*"; exit 1; }
step() { echo; echo "=== $* [t=$(cut -d' ' -f1 /proc/uptime)s]"; }
rc_qps() { rdma resource show qp 2>/dev/null | grep -c 'type RC'; }
ana() { # ana PORT STATE
  echo "$2" > "$CFG/ports/$1/ana_groups/1/ana_state" || { echo "FAIL: port $1 ana_state $2"; return 1; }
  echo "port $1 group 1: $(cat "$CFG/ports/$1/ana_groups/1/ana_state")"
}

step "rxe"; . "$LIB/rxe-up.sh" || fail "rxe setup"
step "modules"
modprobe nvmet || fail "modprobe nvmet"
modprobe nvmet_rdma || fail "modprobe nvmet_rdma"
mountpoint -q /sys/kernel/config || mount -t configfs configfs /sys/kernel/config
[ -d "$CFG" ] || fail "$CFG missing"

step "backing device (null_blk, $NS_SIZE_MB MiB)"
modprobe null_blk nr_devices=0 || fail "modprobe null_blk"
NB=/sys/kernel/config/nullb/nullb0
mkdir -p "$NB" || fail "mkdir $NB"
echo "$NS_SIZE_MB" > "$NB/size"
echo 512 > "$NB/blocksize"
echo 1 > "$NB/memory_backed"
echo 1 > "$NB/power" || fail "null_blk power on"
DEV=/dev/nullb0
[ -e "$DEV" ] || DEV="/dev/nullb$(cat "$NB/index")"
for _ in $(seq 50); do [ -e "$DEV" ] && break; sleep 0.1; done
[ -e "$DEV" ] || fail "$DEV does not exist"

step "subsystem $NQN"
S="$CFG/subsystems/$NQN"
mkdir "$S" || fail "mkdir subsystem"
echo 1 > "$S/attr_allow_any_host"
[ -e "$S/attr_model" ] && echo "kpeer-mpath-nvmet" > "$S/attr_model"
mkdir "$S/namespaces/1" || fail "mkdir namespace"
echo -n "$DEV" > "$S/namespaces/1/device_path" || fail "device_path"
echo "$NS_UUID" > "$S/namespaces/1/device_uuid" 2>/dev/null
echo "$NS_UUID" > "$S/namespaces/1/device_nguid" 2>/dev/null
[ -e "$S/namespaces/1/ana_grpid" ] && echo 1 > "$S/namespaces/1/ana_grpid"
echo 1 > "$S/namespaces/1/enable" || fail "namespace enable"

for pid in 1 2; do
  svc=$((4419 + pid))
  step "port $pid: rdma $TARGET_ADDR:$svc"
  P="$CFG/ports/$pid"
  mkdir "$P" || fail "mkdir port $pid"
  echo rdma > "$P/addr_trtype"
  echo ipv4 > "$P/addr_adrfam"
  echo "$TARGET_ADDR" > "$P/addr_traddr"
  echo "$svc" > "$P/addr_trsvcid"
  [ -d "$P/ana_groups/1" ] || fail "port $pid has no ANA group 1 (kernel without ANA?)"
  if [ "$pid" = 1 ]; then ana 1 optimized || fail "ana"; else ana 2 non-optimized || fail "ana"; fi
  ln -s "$S" "$P/subsystems/$NQN" || fail "enable port $pid"
done
echo "PASS: kernel target up: $NQN on rdma $TARGET_ADDR:4420 (optimized) and :4421 (non-optimized)"
printf 'NQN=%s\nTARGET_ADDR=%s\n' "$NQN" "$TARGET_ADDR" > "$SIGNAL/target-ready.tmp" && mv "$SIGNAL/target-ready.tmp" "$SIGNAL/target-ready"

step "serving the host's requests until $SIGNAL/release (up to $TARGET_WAIT_S s)"
RC=0
end=$(( $(date +%s) + TARGET_WAIT_S ))
while [ ! -e "$SIGNAL/release" ]; do
  [ -e "$SIGNAL/abort" ] && { echo "FAIL: aborted ($(cat "$SIGNAL/abort"))"; RC=4; break; }
  if [ "$(date +%s)" -ge "$end" ]; then echo "FAIL: timeout waiting for release"; RC=3; break; fi
  for req in ana-flip ana-back unlink-1 relink-1; do
    [ -e "$SIGNAL/$req" ] && [ ! -e "$SIGNAL/$req.done" ] || continue
    echo "request $req [t=$(cut -d' ' -f1 /proc/uptime)s]"
    ok=1
    case $req in
      ana-flip) ana 1 inaccessible && ana 2 optimized || ok=0 ;;
      ana-back) ana 1 optimized && ana 2 non-optimized || ok=0 ;;
      unlink-1) rm "$CFG/ports/1/subsystems/$NQN" || ok=0 ;;
      relink-1) ln -s "$S" "$CFG/ports/1/subsystems/$NQN" || ok=0 ;;
    esac
    if [ "$ok" = 1 ]; then echo "PASS: $req done"; touch "$SIGNAL/$req.done"
    else echo "FAIL: $req"; echo failed > "$SIGNAL/$req.done"; RC=1; fi
  done
  sleep 0.2
done
[ "$RC" = 0 ] && echo "released"
dmesg | grep -iE 'nvmet|ana' | tail -n 30

step "stale state left by the host"
n=0
for _ in $(seq 20); do n=$(rc_qps); [ "$n" = 0 ] && break; sleep 0.5; done
if [ "$n" != 0 ]; then
  rdma resource show qp
  echo "FAIL: $n RC QPs still open on rxe0 after the host finished"
  [ "$RC" = 0 ] && RC=5
else
  echo "PASS: no RC QP left on rxe0"
fi

step "teardown"
for P in "$CFG"/ports/*; do rm -f "$P/subsystems/$NQN"; rmdir "$P"; done
echo 0 > "$S/namespaces/1/enable"
rmdir "$S/namespaces/1" "$S"
echo 0 > "$NB/power"; rmdir "$NB"
[ "$RC" = 0 ] && echo "PASS: target torn down"
exit "$RC"
