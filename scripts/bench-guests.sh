#!/usr/bin/env bash
# bench-guests.sh - the side-by-side benchmark of issues 10 and 25, inside
# two kernel-peer guests in one run: fio in guest b through the kernel's
# nvme-rdma host against (i) the kernel's nvmet-rdma and (ii) nvmetd on the
# ibverbs provider, both in guest a on rxe0 with the same null backing; or,
# with -transport tcp, through nvme-tcp against nvmet-tcp and an nvmetd TCP
# port. Jobs: 4 KiB random read QD32 and QD1, 128 KiB sequential read.
# Prints a table (IOPS, MB/s, p50, ratios nvmetd/kernel) and writes JSON.
#
# usage: sudo scripts/bench-guests.sh [-quick] [-out DIR] [-transport rdma|tcp] [-jobs "rr4k-qd32 ..."]
#          [-provider ibverbs|soft] [-nvmetd-args ARGS]
#   -transport  rdma (default) or tcp
#   -jobs       the jobs to run (bench/guests/host.sh), default all three
#   -quick      10 s per job after 2 s ramp (default 30 s after 5 s)
#   -out DIR    where the JSON (bench-guests.json), the share with every guest
#               log and fio JSON go (default bench-out/guests-<date>)
#   -provider   soft: nvmetd on the soft provider instead (rdma_rxe unloaded
#               for it), to check the harness without the ibverbs provider
#   -nvmetd-args extra nvmetd flags, e.g. --poll (busy-polled CQs)
# env: KPEER_DIR (default ../shared/kernel-peer), KPEER_CACHE, KPEER_KERNEL
#   (6.12 for Debian's 6.12 kernel in both guests)
#
# Under QEMU TCG only the ratios mean something. Takes about 3 + 6 x runtime
# minutes... in seconds: ~90 s of boots plus 6 jobs x (runtime + ramp).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
RUNTIME=30 RAMP=5 OUT="" PROVIDER=ibverbs MODE=full NVMETD_ARGS="" TRTYPE=rdma JOBS="rr4k-qd32 rr4k-qd1 sr128k"
while [ $# -gt 0 ]; do
	case "$1" in
	-quick) RUNTIME=10 RAMP=2 MODE=quick; shift ;;
	-out) OUT=$2; shift 2 ;;
	-provider) PROVIDER=$2; shift 2 ;;
	-transport) TRTYPE=$2; shift 2 ;;
	-jobs) JOBS=$2; shift 2 ;;
	-nvmetd-args) NVMETD_ARGS=$2; shift 2 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "unknown argument $1" >&2; exit 2 ;;
	esac
done
[ "$(id -u)" = 0 ] || { echo "bench-guests.sh: must run as root (kernel-peer)" >&2; exit 1; }
case "$TRTYPE" in
rdma) ;;
tcp) PROVIDER="" ;;
*) echo "bench-guests.sh: -transport $TRTYPE: want rdma or tcp" >&2; exit 2 ;;
esac
njobs=$(wc -w <<<"$JOBS")
KPEER_DIR="${KPEER_DIR:-$(cd .. && pwd)/shared/kernel-peer}"
[ -x "$KPEER_DIR/run.sh" ] || { echo "no kernel-peer at $KPEER_DIR" >&2; exit 1; }
OUT="${OUT:-bench-out/guests-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SHARE="$OUT/share"
rm -rf "$SHARE"
mkdir -p "$SHARE/bin" "$SHARE/cfg" "$SHARE/interop/guest"
NQN=nqn.2026-11.io.nvmeof:bench-guests

echo "== building nvmetd ($TRTYPE${PROVIDER:+, $PROVIDER})"
if [ "$PROVIDER" = ibverbs ]; then
	CGO_ENABLED=1 go build -tags ibverbs -o "$SHARE/bin/nvmetd" ./cmd/nvmetd
	ldd "$SHARE/bin/nvmetd" | grep -q libibverbs || { echo "nvmetd built without the ibverbs provider" >&2; exit 1; }
else
	CGO_ENABLED=0 go build -o "$SHARE/bin/nvmetd" ./cmd/nvmetd
fi
cp tests/interop/guest/lib.sh "$SHARE/interop/guest/"
provider_line=""
[ -z "$PROVIDER" ] || provider_line="  provider  = \"$PROVIDER\""
cat > "$SHARE/cfg/nvmetd.hcl" <<EOF
log_level = "info"
port "bench" {
  transport = "$TRTYPE"
$provider_line
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
EOF

echo "== kernel-peer${KPEER_KERNEL:+ (kernel $KPEER_KERNEL)}: guest a targets over $TRTYPE (kernel, then nvmetd), guest b fio ($JOBS); ${RUNTIME}s per job"
t0=$(date +%s)
rc=0
"$KPEER_DIR/run.sh" --share "$SHARE" --timeout $((900 + 2 * njobs * (RUNTIME + RAMP + 30))) \
	--env BENCH_NQN="$NQN" --env BENCH_PROVIDER="$PROVIDER" --env BENCH_SIZE_MB=1024 \
	--env BENCH_TRTYPE="$TRTYPE" --env BENCH_JOBS="$JOBS" \
	--env NVMETD_CONFIG=/share/cfg/nvmetd.hcl --env BENCH_NVMETD_ARGS="$NVMETD_ARGS" \
	--env BENCH_RUNTIME_S="$RUNTIME" --env BENCH_RAMP_S="$RAMP" \
	"$ROOT/bench/guests/target.sh" "$ROOT/bench/guests/host.sh" > "$OUT/run.log" 2>&1 || rc=$?
echo "session: $(( $(date +%s) - t0 )) s, status $rc (logs in $SHARE/out)"
if [ "$rc" != 0 ]; then
	tail -n 30 "$OUT/run.log"
	grep -h '^FAIL' "$SHARE"/out/*/script.log || true
fi
cat "$SHARE/out/a/nvmetd-usage.txt" 2>/dev/null || true
echo
go run ./bench/guests -dir "$SHARE/out/b" -json "$OUT/bench-guests.json" \
	-meta transport="$TRTYPE" -meta mode="$MODE" -meta runtime_s="$RUNTIME" -meta jobs="$JOBS" \
	-meta provider="$PROVIDER" -meta nvmetd_args="$NVMETD_ARGS" \
	-meta backing="null 1GiB, 512-byte blocks (null_blk memory_backed=0; nvmetd backend null)" \
	-meta guests="QEMU TCG, 1 vCPU each, virtio-net${KPEER_KERNEL:+, kernel $KPEER_KERNEL}" \
	-meta date="$(date -u +%FT%TZ)" -meta commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "JSON: $OUT/bench-guests.json"
exit "$rc"
