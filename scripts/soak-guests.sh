#!/usr/bin/env bash
# soak-guests.sh - the soak of issue 10 inside two kernel-peer guests: nvmetd
# on the ibverbs provider in guest a (tests/interop/guest/nvmetd-guest.sh), the
# kernel's nvme-rdma host in guest b running fio write+verify rounds
# (bench/guests/soak-host.sh) for MINUTES minutes. nvmetd's RSS and thread
# count are sampled every minute (nvmetd exposes no goroutine count;
# /proc/PID/status is what is measured). Passes when there was no verify
# error and, after the first minute, RSS grew by at most -tolerance KiB and
# the thread count by at most -threads (the Go runtime starts an OS thread
# now and then for a blocking syscall and keeps it).
#
# The namespace is a file on the guest's tmpfs: a memory namespace would
# grow nvmetd's RSS by what the host writes into it (the first soak run
# here did exactly that, 49 -> 195 MiB while 128 MiB got written), which is
# data, not a leak.
#
# usage: sudo scripts/soak-guests.sh [-minutes N] [-out DIR] [-provider ibverbs|soft] [-tolerance KIB] [-threads N]
#   defaults: 10 minutes, bench-out/soak-<date>, ibverbs, 4096 KiB, 2
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
MINUTES=10 OUT="" PROVIDER=ibverbs TOL=4096 THREADS=2 SAMPLE_S=60
while [ $# -gt 0 ]; do
	case "$1" in
	-minutes) MINUTES=$2; shift 2 ;;
	-out) OUT=$2; shift 2 ;;
	-provider) PROVIDER=$2; shift 2 ;;
	-tolerance) TOL=$2; shift 2 ;;
	-threads) THREADS=$2; shift 2 ;;
	-sample) SAMPLE_S=$2; shift 2 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "unknown argument $1" >&2; exit 2 ;;
	esac
done
[ "$(id -u)" = 0 ] || { echo "soak-guests.sh: must run as root (kernel-peer)" >&2; exit 1; }
KPEER_DIR="${KPEER_DIR:-$(cd .. && pwd)/shared/kernel-peer}"
OUT="${OUT:-bench-out/soak-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SHARE="$OUT/share"
rm -rf "$SHARE"
mkdir -p "$SHARE/bin" "$SHARE/cfg" "$SHARE/interop"
cp -r tests/interop/guest tests/interop/host "$SHARE/interop/"
NQN=nqn.2026-11.io.nvmeof:soak
RXE=1
echo "== building nvmetd ($PROVIDER)"
if [ "$PROVIDER" = ibverbs ]; then
	CGO_ENABLED=1 go build -tags ibverbs -o "$SHARE/bin/nvmetd" ./cmd/nvmetd
	ldd "$SHARE/bin/nvmetd" | grep -q libibverbs || { echo "nvmetd built without the ibverbs provider" >&2; exit 1; }
else
	CGO_ENABLED=0 go build -o "$SHARE/bin/nvmetd" ./cmd/nvmetd
	RXE=0
fi
cat > "$SHARE/cfg/nvmetd.hcl" <<EOF
log_level = "info"
port "soak" {
  transport = "rdma"
  provider  = "$PROVIDER"
  address   = "192.0.2.2"
  service   = 4420
}
subsystem "$NQN" {
  ports          = ["soak"]
  allow_any_host = true
  namespace "1" {
    backend    = "file"
    path       = "/tmp/soak.img"
    size       = "128MiB"
    block_size = 512
    buffered_io = true # the guest's root (initramfs) refuses O_DIRECT
  }
}
EOF

echo "== kernel-peer: nvmetd ($PROVIDER) in guest a, fio verify rounds in guest b for $MINUTES min"
t0=$(date +%s)
rc=0
"$KPEER_DIR/run.sh" --share "$SHARE" --timeout $((MINUTES * 60 + 900)) \
	--env NVMETD_CONFIG=/share/cfg/nvmetd.hcl --env NVMETD_RXE=$RXE --env SAMPLE_S="$SAMPLE_S" \
	--env SOAK_NQN="$NQN" --env SOAK_S=$((MINUTES * 60)) --env SOAK_NS_MB=128 \
	"$ROOT/tests/interop/guest/nvmetd-guest.sh" "$ROOT/bench/guests/soak-host.sh" > "$OUT/run.log" 2>&1 || rc=$?
echo "session: $(( $(date +%s) - t0 )) s, status $rc (logs in $SHARE/out)"
grep -h '^PASS\|^FAIL\|^SOAK' "$SHARE/out/b/script.log" "$SHARE/out/a/script.log" || true

S="$SHARE/out/a/nvmetd-samples.txt"
[ -s "$S" ] || { echo "no samples of nvmetd"; exit 1; }
echo
echo "nvmetd samples (every ${SAMPLE_S}s; uptime, VmRSS, threads, pid):"
awk '{ printf "  t=%7.1fs  rss %7d KiB  threads %3d  pid %d\n", $1, $2, $3, $4 }' "$S"
# growth after the first minute: the first sample at least 60 s after the
# first one is the baseline; later samples may not exceed it (RSS by more
# than the tolerance, threads at all).
verdict=$(awk -v tol="$TOL" -v tht="$THREADS" '
	NR == 1 { t0 = $1; pid = $4 }
	$4 != pid { restart = 1 }
	!base && $1 - t0 >= 59 { base = 1; r0 = $2; th0 = $3; next }
	base { if ($2 - r0 > dr) dr = $2 - r0; if ($3 - th0 > dth) dth = $3 - th0; n++ }
	END {
		if (restart) { print "FAIL nvmetd restarted during the soak"; exit }
		if (!base || n == 0) { print "FAIL too few samples"; exit }
		ok = (dr <= tol && dth <= tht) ? "PASS" : "FAIL"
		printf "%s after the first minute (RSS %d KiB, %d threads): RSS grew at most %d KiB (tolerance %d), threads at most %+d (tolerance %d) over %d samples\n", ok, r0, th0, dr, tol, dth, tht, n
	}' "$S")
echo "$verdict"
grep -h '^SOAK' "$SHARE/out/b/script.log" > "$OUT/soak-summary.txt" || true
echo "$verdict" >> "$OUT/soak-summary.txt"
case "$verdict" in PASS*) ;; *) [ "$rc" = 0 ] && rc=1 ;; esac
exit "$rc"
