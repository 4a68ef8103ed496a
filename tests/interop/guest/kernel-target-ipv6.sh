#!/bin/bash
# kernel-target-ipv6.sh - the Linux kernel NVMe-oF target (nvmet, nvmet-rdma over
# rxe) on an IPv6 port, for our initiator over RoCEv2/IPv6:
#   * eth0 gets GUEST_ADDR6 (/64, no DAD); waits for rxe0's IPv6 GID;
#   * namespace 1 of NQN (any host) is a memory-backed null_blk whose first
#     PATTERN_MB MiB carry "kpeer-pattern blk %08d %0484d\n" per 512-byte block;
#   * port 1: rdma, adrfam ipv6, GUEST_ADDR6:4420; then $KPEER_SIGNAL/target-ready;
#   * at release: the host wrote HOST_MB MiB at offset HOST_OFF_MB MiB and left
#     their sha256 in /share/host-wrote.sha256: the namespace must hold exactly
#     that; no RC QP of nvmet-rdma may be left on rxe0.
# Needs the guest booted with KPEER_IPV6=1.
#
# env (defaults): NQN=nqn.2014-08.org.nvmexpress:kpeer-target GUEST_ADDR6=2001:db8::2
#   GUEST_GID6=2001:0db8:0000:0000:0000:0000:0000:0002 NS_SIZE_MB=64 PATTERN_MB=1
#   HOST_OFF_MB=16 HOST_MB=2 TARGET_WAIT_S=900
set -u
LIB="${KPEER_LIB:-$(cd "$(dirname "$0")" && pwd)}"
NIC="${KPEER_NIC:-eth0}"
NQN="${NQN:-nqn.2014-08.org.nvmexpress:kpeer-target}"
GUEST_ADDR6="${GUEST_ADDR6:-2001:db8::2}"
GUEST_GID6="${GUEST_GID6:-2001:0db8:0000:0000:0000:0000:0000:0002}"
NS_SIZE_MB="${NS_SIZE_MB:-64}"
PATTERN_MB="${PATTERN_MB:-1}"
HOST_OFF_MB="${HOST_OFF_MB:-16}"
HOST_MB="${HOST_MB:-2}"
TARGET_WAIT_S="${TARGET_WAIT_S:-900}"
SIGNAL="${KPEER_SIGNAL:-/tmp/kpeer-signal}"
SHARE="${KPEER_SHARE:-/share}"
CFG=/sys/kernel/config/nvmet
mkdir -p "$SIGNAL"
NFAIL=0
step() { echo; echo "=== $* [t=$(cut -d' ' -f1 /proc/uptime)s]"; }
fail() { echo "FAIL: $*"; echo "RESULT: FAIL"; echo "$*" > "$SIGNAL/abort"; exit 1; }
failc() { echo "FAIL: $*"; NFAIL=$((NFAIL + 1)); }
rc_qps() { rdma resource show qp 2>/dev/null | grep -c 'type RC'; }

step "IPv6 on $NIC"
sysctl -qw "net.ipv6.conf.$NIC.disable_ipv6=0" || fail "IPv6 is disabled (boot with KPEER_IPV6=1)"
ip -6 addr add "$GUEST_ADDR6/64" dev "$NIC" nodad || fail "ip -6 addr add"
ip -6 addr show dev "$NIC"

step "rxe"
# shellcheck source=/dev/null
. "$LIB/rxe-up.sh" || fail "rxe setup"
ok=0
for _ in $(seq 100); do
  grep -qx "$GUEST_GID6" /sys/class/infiniband/"${RXE_NAME:-rxe0}"/ports/1/gids/* 2>/dev/null && { ok=1; break; }
  sleep 0.1
done
[ "$ok" = 1 ] || fail "rxe has no GID $GUEST_GID6"
echo "PASS: rxe GID $GUEST_GID6"

step "modules"
modprobe nvmet || fail "modprobe nvmet"
modprobe nvmet_rdma || fail "modprobe nvmet_rdma"
modprobe null_blk nr_devices=0 || fail "modprobe null_blk"
mountpoint -q /sys/kernel/config || mount -t configfs configfs /sys/kernel/config

step "null_blk ($NS_SIZE_MB MiB, memory backed) and pattern"
NB=/sys/kernel/config/nullb/nullb0
mkdir -p "$NB" || fail "mkdir $NB"
echo "$NS_SIZE_MB" > "$NB/size"
echo 512 > "$NB/blocksize"
echo 1 > "$NB/memory_backed"
echo 1 > "$NB/power" || fail "null_blk power on"
DEV="/dev/nullb$(cat "$NB/index")"
for _ in $(seq 50); do [ -e "$DEV" ] && break; sleep 0.1; done
[ -e "$DEV" ] || fail "$DEV does not exist"
awk -v n=$((PATTERN_MB * 2048)) 'BEGIN { for (i = 0; i < n; i++) printf "kpeer-pattern blk %08d %0484d\n", i, i }' > /tmp/pat.bin
dd if=/tmp/pat.bin of="$DEV" bs=64k oflag=direct conv=notrunc,fsync status=none || fail "writing the pattern"
echo "PASS: pattern written (sha256 $(sha256sum < /tmp/pat.bin | cut -d' ' -f1))"

step "subsystem $NQN, port 1 rdma ipv6 [$GUEST_ADDR6]:4420"
S="$CFG/subsystems/$NQN"
mkdir "$S" || fail "mkdir subsystem"
echo 1 > "$S/attr_allow_any_host"
[ -e "$S/attr_model" ] && echo "kpeer-linux-nvmet-ipv6" > "$S/attr_model"
[ -e "$S/attr_serial" ] && echo "kpeer0006" > "$S/attr_serial"
mkdir "$S/namespaces/1" || fail "mkdir namespace"
echo -n "$DEV" > "$S/namespaces/1/device_path" || fail "device_path"
echo 1 > "$S/namespaces/1/enable" || fail "namespace enable"
P="$CFG/ports/1"
mkdir "$P" || fail "mkdir port"
echo rdma > "$P/addr_trtype"
echo ipv6 > "$P/addr_adrfam"
echo "$GUEST_ADDR6" > "$P/addr_traddr"
echo 4420 > "$P/addr_trsvcid"
ln -s "$S" "$P/subsystems/$NQN" || fail "enable the port"
grep -H . "$P"/addr_* 2>/dev/null | sed "s|$CFG/||"
dmesg | grep -i nvmet | tail -n 5
echo "PASS: kernel target up: $NQN on rdma ipv6 [$GUEST_ADDR6]:4420"
echo "NQN=$NQN TARGET_ADDR=$GUEST_ADDR6" > "$SIGNAL/target-ready"

step "waiting for $SIGNAL/release (up to $TARGET_WAIT_S s)"
end=$(( $(date +%s) + TARGET_WAIT_S ))
while [ ! -e "$SIGNAL/release" ]; do
  [ -e "$SIGNAL/abort" ] && fail "aborted ($(cat "$SIGNAL/abort"))"
  [ "$(date +%s)" -ge "$end" ] && fail "timeout waiting for release"
  sleep 1
done
echo "released"

step "what the host wrote"
want=$(cut -d' ' -f1 "$SHARE/host-wrote.sha256" 2>/dev/null)
got=$(dd if="$DEV" bs=1M skip="$HOST_OFF_MB" count="$HOST_MB" iflag=direct status=none | sha256sum | cut -d' ' -f1)
if [ -n "$want" ] && [ "$want" = "$got" ]; then
  echo "PASS: the namespace holds the host's $HOST_MB MiB at $HOST_OFF_MB MiB (sha256 $got)"
else
  failc "namespace at $HOST_OFF_MB MiB: sha256 $got, host says ${want:-nothing}"
fi
left=""
for _ in $(seq 20); do
  left=$(rc_qps)
  [ "$left" = 0 ] && break
  sleep 0.5
done
if [ "$left" = 0 ]; then echo "PASS: no RC QP left on rxe0"; else failc "$left RC QPs left on rxe0"; rdma resource show qp; fi
rxe_counters
dmesg | grep -iE 'nvmet|rdma|rxe' | tail -n 20
rm -f "$P/subsystems/$NQN"; rmdir "$P" "$S/namespaces/1" "$S" 2>/dev/null
if [ "$NFAIL" = 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL ($NFAIL failed checks)"; fi
[ "$NFAIL" = 0 ]
