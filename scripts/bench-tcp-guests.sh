#!/usr/bin/env bash
# bench-tcp-guests.sh - the guest comparison of issue 25, inside two
# kernel-peer guests in one run: fio in guest b through the kernel's
# nvme-tcp host against (i) the kernel's nvmet-tcp and (ii) nvmetd on a TCP
# port, both in guest a with the same null backing (null_blk for the kernel,
# nvmetd's null backend; 1 GiB, 512-byte blocks, no data kept). Default job:
# 4 KiB random read QD32 (the goal: nvmetd >= 1.0x the kernel's IOPS);
# -jobs adds rr4k-qd1 and sr128k. Prints both figures and the ratio
# nvmetd/kernel (bench/guests) and writes JSON.
#
# usage: sudo scripts/bench-tcp-guests.sh [-quick] [-jobs "rr4k-qd32 rr4k-qd1 sr128k"] [-out DIR]
#   -quick      10 s per job after 2 s ramp (default 30 s after 5 s)
#   -jobs       the jobs to run (tests/interop/guest/tcp-bench-host.sh)
#   -out DIR    where the JSON (bench-tcp-guests.json) and the share with
#               every guest log and fio JSON go (default bench-out/tcp-guests-<date>)
# env: KPEER_DIR (default ../shared/kernel-peer), KPEER_CACHE, KPEER_KERNEL
#   (6.12 for Debian's 6.12 kernel in both guests)
#
# The guests are QEMU TCG (no KVM), one vCPU each: the absolute numbers mean
# little, the ratio is the result. About 90 s of boots plus, per job and
# target, runtime + ramp.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
RUNTIME=30 RAMP=5 OUT="" MODE=full JOBS="rr4k-qd32"
while [ $# -gt 0 ]; do
	case "$1" in
	-quick) RUNTIME=10 RAMP=2 MODE=quick; shift ;;
	-jobs) JOBS=$2; shift 2 ;;
	-out) OUT=$2; shift 2 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "unknown argument $1" >&2; exit 2 ;;
	esac
done
[ "$(id -u)" = 0 ] || { echo "bench-tcp-guests.sh: must run as root (kernel-peer)" >&2; exit 1; }
KPEER_DIR="${KPEER_DIR:-$(cd .. && pwd)/shared/kernel-peer}"
[ -x "$KPEER_DIR/run.sh" ] || { echo "no kernel-peer at $KPEER_DIR" >&2; exit 1; }
OUT="${OUT:-bench-out/tcp-guests-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SHARE="$OUT/share"
rm -rf "$SHARE"
mkdir -p "$SHARE/bin" "$SHARE/cfg" "$SHARE/interop/guest"
NQN=nqn.2026-12.io.nvmeof:bench-tcp-guests
njobs=$(wc -w <<<"$JOBS")

echo "== building nvmetd"
CGO_ENABLED=0 go build -o "$SHARE/bin/nvmetd" ./cmd/nvmetd
cp tests/interop/guest/lib.sh "$SHARE/interop/guest/"
cat > "$SHARE/cfg/nvmetd.hcl" <<CFG
log_level = "info"
port "bench" {
  transport = "tcp"
  address   = "192.0.2.2"
  service   = 4420
}
subsystem "$NQN" {
  ports          = ["bench"]
  allow_any_host = true
  namespace "1" {
    backend    = "null"
    size       = "1GiB"
    block_size = 512
  }
}
CFG

echo "== kernel-peer${KPEER_KERNEL:+ (kernel $KPEER_KERNEL)}: guest a targets (kernel nvmet-tcp, then nvmetd), guest b fio ($JOBS); ${RUNTIME}s per job"
t0=$(date +%s)
rc=0
"$KPEER_DIR/run.sh" --share "$SHARE" --timeout $((900 + 2 * njobs * (RUNTIME + RAMP + 30))) \
	--env BENCH_NQN="$NQN" --env BENCH_SIZE_MB=1024 --env NVMETD_CONFIG=/share/cfg/nvmetd.hcl \
	--env BENCH_RUNTIME_S="$RUNTIME" --env BENCH_RAMP_S="$RAMP" --env BENCH_JOBS="$JOBS" \
	"$ROOT/tests/interop/guest/tcp-bench-target.sh" "$ROOT/tests/interop/guest/tcp-bench-host.sh" > "$OUT/run.log" 2>&1 || rc=$?
echo "session: $(( $(date +%s) - t0 )) s, status $rc (logs in $SHARE/out)"
if [ "$rc" != 0 ]; then
	tail -n 30 "$OUT/run.log"
	grep -h '^FAIL' "$SHARE"/out/*/script.log || true
fi
cat "$SHARE/out/a/nvmetd-usage.txt" 2>/dev/null || true
echo
go run ./bench/guests -dir "$SHARE/out/b" -json "$OUT/bench-tcp-guests.json" \
	-meta transport=tcp -meta mode="$MODE" -meta runtime_s="$RUNTIME" -meta jobs="$JOBS" \
	-meta backing="null 1GiB, 512-byte blocks (null_blk memory_backed=0; nvmetd backend null)" \
	-meta guests="QEMU TCG, 1 vCPU each, virtio-net${KPEER_KERNEL:+, kernel $KPEER_KERNEL}" \
	-meta date="$(date -u +%FT%TZ)" -meta commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "JSON: $OUT/bench-tcp-guests.json"
exit "$rc"
