#!/bin/bash
# kernel-host-ipv6.sh - kernel-peer's kernel-host.sh (the kernel's nvme-rdma host:
# discover, connect, identify, smart-log, write/read/verify, fio, disconnect) over
# RoCEv2 on IPv6: gives eth0 a global IPv6 address, waits for rxe0's IPv6 GID,
# checks that the target's address answers, then runs kernel-host.sh against it.
# Needs the guest booted with KPEER_IPV6=1 (run.sh --env KPEER_IPV6=1).
#
# env (defaults):
#   GUEST_ADDR6=2001:db8::2        this guest's address (/64, no DAD)
#   GUEST_GID6=2001:0db8:0000:0000:0000:0000:0000:0002   the same as rxe's sysfs prints it
#   TARGET_ADDR6=2001:db8::1       the target (nvmetd on the host side of the namespace)
#   and kernel-host.sh's own (NQN, IO_MB, FIO_MB, DISCOVER_TRIES, ...).
set -u
LIB="${KPEER_LIB:-$(cd "$(dirname "$0")" && pwd)}"
NIC="${KPEER_NIC:-eth0}"
GUEST_ADDR6="${GUEST_ADDR6:-2001:db8::2}"
GUEST_GID6="${GUEST_GID6:-2001:0db8:0000:0000:0000:0000:0000:0002}"
TARGET_ADDR6="${TARGET_ADDR6:-2001:db8::1}"
SIGNAL="${KPEER_SIGNAL:-/tmp/kpeer-signal}"
mkdir -p "$SIGNAL"
fail() { echo "FAIL: $*"; echo "RESULT: FAIL"; touch "$SIGNAL/release"; exit 1; }

echo "=== IPv6 on $NIC [t=$(cut -d' ' -f1 /proc/uptime)s]"
sysctl -qw "net.ipv6.conf.$NIC.disable_ipv6=0" || fail "IPv6 is disabled (boot with KPEER_IPV6=1)"
ip -6 addr add "$GUEST_ADDR6/64" dev "$NIC" nodad || fail "ip -6 addr add $GUEST_ADDR6/64 dev $NIC"
ip -6 addr show dev "$NIC"

echo "=== rxe"
# shellcheck source=/dev/null
. "$LIB/rxe-up.sh" || fail "rxe setup"
ok=0
for _ in $(seq 100); do
  if grep -qx "$GUEST_GID6" /sys/class/infiniband/"${RXE_NAME:-rxe0}"/ports/1/gids/* 2>/dev/null; then ok=1; break; fi
  sleep 0.1
done
[ "$ok" = 1 ] || fail "rxe has no GID $GUEST_GID6"
for f in /sys/class/infiniband/"${RXE_NAME:-rxe0}"/ports/1/gids/*; do
  g=$(cat "$f" 2>/dev/null) || continue
  [ "$g" = "$GUEST_GID6" ] && echo "PASS: rxe GID[$(basename "$f")] $g $(cat "/sys/class/infiniband/${RXE_NAME:-rxe0}/ports/1/gid_attrs/types/$(basename "$f")" 2>/dev/null)"
done

echo "=== ping $TARGET_ADDR6"
ok=0
for _ in $(seq 20); do
  if ping -6 -c 1 -W 2 "$TARGET_ADDR6" >/dev/null 2>&1; then ok=1; break; fi
  sleep 1
done
[ "$ok" = 1 ] || fail "$TARGET_ADDR6 does not answer ping"
echo "PASS: $TARGET_ADDR6 answers ping"
ip -6 neigh show dev "$NIC"

TARGET_ADDR="$TARGET_ADDR6" bash "$LIB/kernel-host.sh"
rc=$?
echo "=== after kernel-host.sh (exit $rc)"
rxe_counters
dmesg | grep -iE 'nvme|rdma|rxe' | tail -n 30
exit "$rc"
