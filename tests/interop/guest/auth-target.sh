#!/bin/bash
# auth-target.sh - the Linux kernel's nvmet-rdma target (6.12: in-band
# authentication) requiring DH-HMAC-CHAP from its hosts, for our initiator on
# the host side of the namespace.
#
# The keys come from the guest's own `nvme gen-dhchap-key` (nvme-cli), not
# from our code: they are written to $KPEER_SIGNAL/keys.env for the host test
# before target-ready.
#
#   HOST1_NQN  key (transformed with sha256), hmac(sha256), null DH group
#   HOST2_NQN  key and controller key, hmac(sha512), $HOST2_DHGROUP (ffdhe2048)
# Both hosts are allowed on $NQN (attr_allow_any_host 0). A 32 MiB memory
# backed null_blk is namespace 1. Waits for $KPEER_SIGNAL/release.
#
# env: NQN HOST1_NQN HOST2_NQN (required); TARGET_ADDR=$KPEER_IP TRSVCID=4420
#      TARGET_WAIT_S=900
set -u
NQN="${NQN:?}" HOST1_NQN="${HOST1_NQN:?}" HOST2_NQN="${HOST2_NQN:?}"
TARGET_ADDR="${TARGET_ADDR:-${KPEER_IP:-192.0.2.2}}"
TRSVCID="${TRSVCID:-4420}"
TARGET_WAIT_S="${TARGET_WAIT_S:-900}"
SIGNAL="${KPEER_SIGNAL:-/tmp/kpeer-signal}"
CFG=/sys/kernel/config/nvmet
mkdir -p "$SIGNAL"

ts() { cut -d' ' -f1 /proc/uptime; }
step() { echo; echo "=== $* [t=$(ts)s]"; }
fail() { echo "FAIL: $*"; echo "RESULT: FAIL"; exit 1; }

step "modules and rxe"
# shellcheck source=/dev/null
. "${KPEER_LIB:-/share/.kpeer/lib}/rxe-up.sh" || fail "rxe"
modprobe nvmet-rdma || fail "modprobe nvmet-rdma"
modprobe nvme-auth 2>/dev/null
mountpoint -q /sys/kernel/config || mount -t configfs configfs /sys/kernel/config
uname -r
nvme version

step "keys (nvme gen-dhchap-key)"
K1=$(nvme gen-dhchap-key --hmac=1 --nqn="$HOST1_NQN") || fail "gen-dhchap-key 1"
K2=$(nvme gen-dhchap-key --hmac=0 --key-length=48 --nqn="$HOST2_NQN") || fail "gen-dhchap-key 2"
C2=$(nvme gen-dhchap-key --hmac=0 --nqn="$NQN") || fail "gen-dhchap-key ctrl"
echo "key formats: ${K1%%:*}:${K1:7:2} ${K2%%:*}:${K2:7:2} ${C2%%:*}:${C2:7:2}"

step "backing device"
modprobe null_blk nr_devices=0 || fail "modprobe null_blk"
NB=/sys/kernel/config/nullb/nullb0
mkdir -p "$NB" || fail "mkdir $NB"
echo 32 > "$NB/size"; echo 512 > "$NB/blocksize"; echo 1 > "$NB/memory_backed"
echo 1 > "$NB/power" || fail "null_blk power on"
DEV=/dev/nullb0
for _ in $(seq 50); do [ -e "$DEV" ] && break; sleep 0.1; done
[ -e "$DEV" ] || fail "$DEV missing"

step "hosts"
H="$CFG/hosts"
mkdir "$H/$HOST1_NQN" || fail "mkdir host 1"
echo "$K1" > "$H/$HOST1_NQN/dhchap_key" || fail "host 1 dhchap_key"
echo "hmac(sha256)" > "$H/$HOST1_NQN/dhchap_hash" || fail "host 1 dhchap_hash"
echo "null" > "$H/$HOST1_NQN/dhchap_dhgroup" || fail "host 1 dhchap_dhgroup"
mkdir "$H/$HOST2_NQN" || fail "mkdir host 2"
echo "$K2" > "$H/$HOST2_NQN/dhchap_key" || fail "host 2 dhchap_key"
echo "$C2" > "$H/$HOST2_NQN/dhchap_ctrl_key" || fail "host 2 dhchap_ctrl_key"
echo "hmac(sha512)" > "$H/$HOST2_NQN/dhchap_hash" || fail "host 2 dhchap_hash"
echo "${HOST2_DHGROUP:-ffdhe2048}" > "$H/$HOST2_NQN/dhchap_dhgroup" || fail "host 2 dhchap_dhgroup"
for h in "$HOST1_NQN" "$HOST2_NQN"; do
  echo "host $h: hash $(cat "$H/$h/dhchap_hash") dhgroup $(cat "$H/$h/dhchap_dhgroup")"
done

step "subsystem $NQN"
S="$CFG/subsystems/$NQN"
mkdir "$S" || fail "mkdir subsystem"
echo 0 > "$S/attr_allow_any_host"
ln -s "$H/$HOST1_NQN" "$S/allowed_hosts/$HOST1_NQN" || fail "allow host 1"
ln -s "$H/$HOST2_NQN" "$S/allowed_hosts/$HOST2_NQN" || fail "allow host 2"
mkdir "$S/namespaces/1" || fail "mkdir namespace"
echo -n "$DEV" > "$S/namespaces/1/device_path" || fail "device_path"
echo 1 > "$S/namespaces/1/enable" || fail "namespace enable"
P="$CFG/ports/1"
mkdir "$P" || fail "mkdir port"
echo rdma > "$P/addr_trtype"; echo ipv4 > "$P/addr_adrfam"
echo "$TARGET_ADDR" > "$P/addr_traddr"; echo "$TRSVCID" > "$P/addr_trsvcid"
ln -s "$S" "$P/subsystems/$NQN" || fail "enable port"

printf 'HOST1_KEY=%s\nHOST2_KEY=%s\nHOST2_CTRL_KEY=%s\n' "$K1" "$K2" "$C2" > "$SIGNAL/keys.env"
echo "PASS: kernel target up with DH-HMAC-CHAP: $NQN on rdma $TARGET_ADDR:$TRSVCID"
printf 'NQN=%s\nTARGET_ADDR=%s\nTRSVCID=%s\n' "$NQN" "$TARGET_ADDR" "$TRSVCID" > "$SIGNAL/target-ready.tmp" &&
  mv "$SIGNAL/target-ready.tmp" "$SIGNAL/target-ready"

step "waiting for $SIGNAL/release (up to $TARGET_WAIT_S s)"
RC=0
end=$(( $(date +%s) + TARGET_WAIT_S ))
while [ ! -e "$SIGNAL/release" ]; do
  [ -e "$SIGNAL/abort" ] && { echo "FAIL: aborted"; RC=4; break; }
  [ "$(date +%s)" -ge "$end" ] && { echo "FAIL: timeout waiting for release"; RC=3; break; }
  sleep 1
done

step "kernel log"
dmesg | grep -iE 'nvmet|auth' | tail -n 60
# the pattern the host wrote at 0 (host 1) and 1 MiB (host 2)
dd if="$DEV" bs=1M count=2 status=none | sha256sum | sed 's/^/ns1 first 2 MiB sha256 /'
rm -f "$P/subsystems/$NQN" "$S/allowed_hosts/"* 2>/dev/null
rmdir "$S/namespaces/1" "$S" "$P" "$H/$HOST1_NQN" "$H/$HOST2_NQN" 2>/dev/null
[ "$RC" = 0 ] && echo "RESULT: PASS" || echo "RESULT: FAIL"
exit "$RC"
