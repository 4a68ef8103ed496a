#!/bin/bash
# smart.sh - SMART / Health of real (emulated) disks through nvmetd (issue 13
# item 6), in one guest: QEMU attaches an NVMe drive and an AHCI SATA drive
# (KPEER_QEMU_ARGS, see tests/interop/smart_test.go); nvmetd (ibverbs, rxe0)
# exports them as block namespaces 1 (NVMe) and 2 (SATA) beside a memory
# namespace 3, and the guest's own kernel host connects over rxe loopback
# and runs `nvme smart-log` on each namespace.
#
# env: NVMETD_CONFIG (required; its path "@NVME@" and "@SATA@" are replaced
# by the drives' nodes), NQN, TRSVCID=4420, DEV_WAIT_S=60, READY_WAIT_S=120.
# Writes to $KPEER_OUT: direct-nvme.json (`nvme smart-log` of the emulated
# controller itself), sata-model.txt, ns1.json, ns2.json, ns3.json (through
# nvmetd), nvmetd.log and, when /share/bin has bdev.test (target/bdev's test
# binary), bdev-test.log of its TestReadHealthDisks on the drives and on a
# partition of the SATA drive (the test writes its MBR). Prints PASS:/FAIL: lines and "RESULT: PASS|FAIL".
set -u
# shellcheck source=/dev/null
. "${INTEROP:-/share/interop}/guest/lib.sh"
NVMETD_CONFIG="${NVMETD_CONFIG:?NVMETD_CONFIG not set}"
NQN="${NQN:?NQN not set}"
TRSVCID="${TRSVCID:-4420}"
DEV_WAIT_S="${DEV_WAIT_S:-60}"
READY_WAIT_S="${READY_WAIT_S:-120}"
LOG="$OUT/nvmetd.log"
NVMETD_PID=""
CONNECTED=0

finish() {
  [ "$CONNECTED" = 1 ] && nvme disconnect -n "$NQN" >/dev/null 2>&1
  if [ -n "$NVMETD_PID" ]; then
    kill -TERM "$NVMETD_PID" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$NVMETD_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$NVMETD_PID" 2>/dev/null
  fi
  if [ "$NFAIL" = 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL ($NFAIL failed checks)"; fi
  [ "$NFAIL" = 0 ]
  exit $?
}
trap finish EXIT

# wait_for SECONDS CMD...: poll CMD every 0.2 s until it succeeds.
wait_for() {
  local end=$(( $(date +%s) + $1 )); shift
  until "$@"; do
    [ "$(date +%s)" -ge "$end" ] && return 1
    sleep 0.2
  done
}
# sata_disk: the sd node of QEMU's AHCI disk ("QEMU HARDDISK").
sata_disk() {
  local d
  for d in /sys/block/sd*; do
    [ -e "$d/device/model" ] || continue
    grep -q 'QEMU HARDDISK' "$d/device/model" && { echo "/dev/$(basename "$d")"; return 0; }
  done
  return 1
}
# fabric_ctrl: the /dev/nvmeN of the kernel host's controller for $NQN.
fabric_ctrl() {
  local c
  for c in /sys/class/nvme/nvme*; do
    [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$NQN" ] && [ "$(cat "$c/transport" 2>/dev/null)" = rdma ] &&
      { echo "/dev/$(basename "$c")"; return 0; }
  done
  return 1
}

install_bins
step "emulated drives"
run modprobe -a nvme ahci sd_mod sg || abort "modprobe nvme ahci sd_mod sg"
wait_for "$DEV_WAIT_S" test -b /dev/nvme0n1 || abort "no /dev/nvme0n1 within $DEV_WAIT_S s"
wait_for "$DEV_WAIT_S" sata_disk || abort "no QEMU HARDDISK sd disk within $DEV_WAIT_S s"
SATA=$(sata_disk)
NVME_CTRL=/dev/nvme0
cat /sys/class/nvme/nvme0/model "/sys/block/$(basename "$SATA")/device/model" | tee "$OUT/sata-model.txt"
pass "NVMe /dev/nvme0n1 and SATA $SATA present [t=$(ts)s]"

step "SMART of the emulated NVMe drive, read directly"
echo "\$ nvme smart-log $NVME_CTRL -o json"
nvme smart-log "$NVME_CTRL" -o json > "$OUT/direct-nvme.json" || failc "nvme smart-log $NVME_CTRL"
cat "$OUT/direct-nvme.json"
command -v smartctl >/dev/null && run smartctl -A "$SATA" | tee "$OUT/direct-sata.txt"

if [ -x /usr/local/bin/bdev.test ]; then
  step "target/bdev's TestReadHealthDisks on the drives and a partition"
  DISKS="/dev/nvme0n1 $SATA"
  # The test wrote an MBR with one partition into the SATA image.
  if wait_for 30 test -b "${SATA}1"; then
    DISKS="$DISKS ${SATA}1"
  else
    failc "no partition ${SATA}1 (the test's MBR)"
  fi
  if BDEV_HEALTH_DISKS="$DISKS" bdev.test -test.run '^TestReadHealthDisks$' -test.v > "$OUT/bdev-test.log" 2>&1; then
    pass "bdev TestReadHealthDisks ($DISKS)"
  else
    failc "bdev TestReadHealthDisks ($DISKS)"
  fi
  cat "$OUT/bdev-test.log"
fi

rxe
step "nvmetd exporting $NVME_CTRL""n1 and $SATA"
CFG=/tmp/nvmetd-smart.hcl
sed -e "s|@NVME@|/dev/nvme0n1|" -e "s|@SATA@|$SATA|" "$NVMETD_CONFIG" > "$CFG"
cat "$CFG"
run nvmetd --config "$CFG" --check || abort "nvmetd --check"
nvmetd --config "$CFG" > "$LOG" 2>&1 &
NVMETD_PID=$!
wait_for "$READY_WAIT_S" grep -q '\blistening\b' "$LOG" || { tail -n 40 "$LOG"; abort "nvmetd not listening within $READY_WAIT_S s"; }
pass "nvmetd listening (pid $NVMETD_PID) [t=$(ts)s]"

step "kernel host over rxe loopback"
run modprobe nvme-rdma || abort "modprobe nvme-rdma"
run nvme connect -t rdma -a "$KPEER_IP" -s "$TRSVCID" -n "$NQN" || { tail -n 40 "$LOG"; abort "nvme connect"; }
CONNECTED=1
wait_for 30 fabric_ctrl || abort "no controller for $NQN"
CTRL=$(fabric_ctrl)
pass "connected: $CTRL [t=$(ts)s]"

step "SMART / Health log of each namespace through nvmetd"
for ns in 1 2 3; do
  echo "\$ nvme smart-log $CTRL -n $ns -o json"
  if nvme smart-log "$CTRL" -n "$ns" -o json > "$OUT/ns$ns.json"; then
    cat "$OUT/ns$ns.json"
    pass "smart-log namespace $ns"
  else
    failc "nvme smart-log $CTRL -n $ns"
  fi
done
run nvme smart-log "$CTRL" -n 2 || true

step "disconnect"
run nvme disconnect -n "$NQN" && CONNECTED=0
