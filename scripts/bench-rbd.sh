#!/usr/bin/env bash
# bench-rbd.sh - fio figures for an RBD-backed against a file-backed namespace
# (issue 14), through our fio engine (out/fio-nvmeof.so, soft RoCE on
# loopback) against one nvmetd built with -tags rbd that exports both:
# namespace 1 on an RBD image of the throwaway test cluster
# (internal/cephtest/ceph-up.sh: one monitor, manager and memstore OSD, pool
# size 1), namespace 2 on a file in a temporary directory, both SIZE_MB.
#
#   sudo ./scripts/bench-rbd.sh            # 10 s per job: about 3 minutes
#   RUNTIME=5 SIZE_MB=256 sudo ./scripts/bench-rbd.sh
#
# Jobs, per namespace, in this order (the sequential write first fills the
# namespace, so the reads read written blocks): 128 KiB sequential write and
# read at iodepth 8, 4 KiB random read and write at iodepth 1 and 32. Prints
# one table (IOPS, MiB/s, mean and p99 completion latency) and the load
# average before and after. Everything runs in a network namespace of its own
# (unshare --net), so the cluster's and nvmetd's loopback ports meet no others.
# Needs root, fio, the Ceph packages, librbd-dev (see docs/rbd.md) and
# out/fio-nvmeof.so (scripts/build-fio-engine.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNTIME=${RUNTIME:-10}
SIZE_MB=${SIZE_MB:-256}

if [ "${BENCH_RBD_INNER:-}" != 1 ]; then
	[ "$(id -u)" -eq 0 ] || { echo "bench-rbd.sh: needs root (network namespace, soft RoCE)" >&2; exit 3; }
	for c in fio ceph-mon ceph-osd rbd; do
		command -v "$c" >/dev/null || { echo "bench-rbd.sh: $c not installed" >&2; exit 3; }
	done
	[ -f out/fio-nvmeof.so ] || ./scripts/build-fio-engine.sh out/fio-nvmeof.so
	echo "== building out/nvmetd-rbd (-tags rbd)" >&2
	CGO_ENABLED=1 go build -tags rbd -o out/nvmetd-rbd ./cmd/nvmetd
	exec unshare --net env BENCH_RBD_INNER=1 "$0" "$@"
fi

ip link set lo up
work=$(mktemp -d /tmp/bench-rbd.XXXXXX)
nvmetd_pid=""
cleanup() {
	[ -n "$nvmetd_pid" ] && kill "$nvmetd_pid" 2>/dev/null && wait "$nvmetd_pid" 2>/dev/null
	CEPH_DIR=$work/ceph bash internal/cephtest/ceph-up.sh purge >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

echo "== load before: $(uptime)"
echo "== starting the test cluster" >&2
conf=$(CEPH_DIR=$work/ceph CEPH_PORT=40200 CEPH_WAIT=150 bash internal/cephtest/ceph-up.sh start)
rbd -c "$conf" create --size "${SIZE_MB}M" --image-feature layering rbd/bench
nqn=nqn.2026-12.io.nvmeof:bench-rbd
cat > "$work/nvmetd.hcl" <<EOF
log_level = "warn"
port "bench" {
  transport = "rdma"
  address   = "127.0.0.1"
  service   = 4420
}
subsystem "$nqn" {
  ports          = ["bench"]
  allow_any_host = true
  namespace "1" {
    backend   = "rbd"
    pool      = "rbd"
    image     = "bench"
    ceph_conf = "$conf"
  }
  namespace "2" {
    backend = "file"
    path    = "$work/ns2.img"
    size    = "${SIZE_MB}MiB"
  }
}
EOF
out/nvmetd-rbd --config "$work/nvmetd.hcl" > "$work/nvmetd.log" 2>&1 &
nvmetd_pid=$!
for _ in $(seq 100); do
	fio --ioengine=external:"$PWD/out/fio-nvmeof.so" --traddr=127.0.0.1 --trsvcid=4420 --subnqn=$nqn \
		--host_traddr=127.0.0.2 --nsid=2 --name=probe --rw=read --bs=4k --size=4k --output=/dev/null >/dev/null 2>&1 && break
	kill -0 "$nvmetd_pid" || { cat "$work/nvmetd.log"; exit 1; }
	sleep 0.2
done

jobs=("seqwrite-128k-qd8 write 128k 8" "seqread-128k-qd8 read 128k 8"
	"randread-4k-qd1 randread 4k 1" "randread-4k-qd32 randread 4k 32"
	"randwrite-4k-qd1 randwrite 4k 1" "randwrite-4k-qd32 randwrite 4k 32")
printf '%-10s %-20s %9s %9s %12s %12s\n' namespace job IOPS MiB/s "mean lat" "p99 lat"
for ns in 1 2; do
	name=$([ "$ns" = 1 ] && echo RBD || echo file)
	for j in "${jobs[@]}"; do
		read -r job rw bs qd <<< "$j"
		fio --ioengine=external:"$PWD/out/fio-nvmeof.so" --traddr=127.0.0.1 --trsvcid=4420 --subnqn=$nqn \
			--host_traddr=127.0.0.2 --nsid="$ns" --name="$job" --rw="$rw" --bs="$bs" --iodepth="$qd" \
			--size="${SIZE_MB}M" --runtime="$RUNTIME" --time_based=1 --output-format=json > "$work/$ns-$job.json"
		python3 - "$work/$ns-$job.json" "$name" "$job" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
d = j["write"] if j["write"]["io_bytes"] > 0 else j["read"]
if j.get("error", 0):
    print("job error", j["error"], file=sys.stderr); sys.exit(1)
lat = d["clat_ns"]
p99 = lat.get("percentile", {}).get("99.000000", 0)
def ms(ns): return "%.3f ms" % (ns / 1e6)
print("%-10s %-20s %9.0f %9.1f %12s %12s" % (sys.argv[2], sys.argv[3], d["iops"], d["bw_bytes"] / 1048576, ms(lat["mean"]), ms(p99)))
PY
	done
done
echo "== load after: $(uptime)"
