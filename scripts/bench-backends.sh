#!/usr/bin/env bash
# bench-backends.sh - the benchmark rows of issue 23 (file and block
# namespaces on io_uring), each against fio directly on the same medium in
# the same run:
#   host  on this machine's loopback: a file namespace on ext4 in a loop
#         device and one on a tmpfs file; fio through our engine against
#         nvmetd (soft provider) vs fio libaio O_DIRECT on the same file;
#         4 KiB randread and randwrite at QD32; IOPS, ratio, and CPU
#         microseconds per I/O (fio + nvmetd for ours, fio alone direct).
#   guest in a kernel-peer guest with Linux 6.12: null_blk irqmode=2
#         completion_nsec=10000000 (10 ms per I/O, any number in flight),
#         exported by nvmetd as a block namespace; fio through our engine
#         vs fio libaio O_DIRECT on /dev/nullb0 (scripts/bench-backends-guest.sh);
#         the engine over soft RoCE (row nullb) and over NVMe/TCP (nullb-tcp).
#         Goal: >= 0.8x; the old 4-worker ceiling was 4/32 = 0.125x.
#
# usage: sudo scripts/bench-backends.sh [-smoke] [-runtime S] [-smp N] [-host-only|-guest-only] [-out DIR]
#   -smoke       3 s per job (does everything run?), default 30 s
#   -smp N       the guest's vCPUs (default 1, as bench-guests.sh: fio, the engine and nvmetd
#                share them, so under TCG the CPU may bound the rows, not the device;
#                2 was slower in a smoke run on a loaded host)
#   -out DIR     fio JSON, logs and bench-backends.txt (default bench-out/backends-<date>)
# env: KPEER_DIR (default ../shared/kernel-peer), SIZE_MB (file size, 1024)
#
# Needs root (loop device, mounts, kernel-peer), fio, and the engine build
# (scripts/build-fio-engine.sh). Everything it mounts, attaches and starts
# is undone at the end, by name and PID.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
RUNTIME=30 OUT="" PARTS="host guest" SMP=1
while [ $# -gt 0 ]; do
	case "$1" in
	-smoke) RUNTIME=3; shift ;;
	-runtime) RUNTIME=$2; shift 2 ;;
	-smp) SMP=$2; shift 2 ;;
	-host-only) PARTS=host; shift ;;
	-guest-only) PARTS=guest; shift ;;
	-out) OUT=$2; shift 2 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "unknown argument $1" >&2; exit 2 ;;
	esac
done
[ "$(id -u)" = 0 ] || { echo "bench-backends.sh: must run as root (loop device, mounts, kernel-peer)" >&2; exit 1; }
command -v fio >/dev/null || { echo "bench-backends.sh: fio not installed (apt-get install fio)" >&2; exit 3; }
SIZE_MB="${SIZE_MB:-1024}"
OUT="${OUT:-bench-out/backends-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
JOBS="randread randwrite"
QD=32

echo "== building out/fio-nvmeof.so and out/nvmetd"
./scripts/build-fio-engine.sh out/fio-nvmeof.so
go build -o out/nvmetd ./cmd/nvmetd

# cleanup undoes what this script set up, each by its own name or PID.
WORK=$(mktemp -d /tmp/bench-backends.XXXXXX)
LOOP="" NVMETD_PID=""
cleanup() {
	[ -z "$NVMETD_PID" ] || { kill "$NVMETD_PID" 2>/dev/null; wait "$NVMETD_PID" 2>/dev/null || true; }
	mountpoint -q "$WORK/ext4" && umount "$WORK/ext4"
	mountpoint -q "$WORK/tmpfs" && umount "$WORK/tmpfs"
	[ -z "$LOOP" ] || losetup -d "$LOOP"
	rm -rf "$WORK"
}
trap cleanup EXIT

# cpu_ticks PID: utime + stime of a process, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# fio_run NAME ARGS...: runs a 4 KiB QD32 job, JSON to $OUT/NAME.json, the
# fio process's user+system seconds to $OUT/NAME.cpu.
fio_run() {
	local name=$1; shift
	local t
	t=$( { TIMEFORMAT='%U %S'; time fio "$@" --bs=4k --iodepth=$QD --runtime="$RUNTIME" --time_based \
		--output-format=json --output="$OUT/$name.json" >/dev/null; } 2>&1 | tail -n 1)
	echo "$t" | awk '{print $1 + $2}' > "$OUT/$name.cpu"
}

if [[ " $PARTS " == *" host "* ]]; then
	echo "== host: ext4 in a loop device and tmpfs, ${SIZE_MB} MiB files, ${RUNTIME}s per job"
	mkdir -p "$WORK/ext4" "$WORK/tmpfs"
	truncate -s $((SIZE_MB + 256))M "$WORK/ext4.img"
	LOOP=$(losetup --find --show --direct-io=on "$WORK/ext4.img")
	mkfs.ext4 -q -F "$LOOP"
	mount "$LOOP" "$WORK/ext4"
	mount -t tmpfs -o size=$((SIZE_MB + 64))M tmpfs "$WORK/tmpfs"
	for fs in ext4 tmpfs; do
		# Written once in full: reads then hit allocated blocks on both sides.
		dd if=/dev/zero of="$WORK/$fs/ns.img" bs=1M count="$SIZE_MB" conv=fsync status=none
	done
	NQN=nqn.2026-11.io.nvmeof:bench-backends
	cat > "$WORK/nvmetd.hcl" <<EOF
log_level = "info"
port "lo" {
  transport = "rdma"
  provider  = "soft"
  address   = "127.0.53.1"
  service   = 4457
}
subsystem "$NQN" {
  ports          = ["lo"]
  allow_any_host = true
  namespace "1" {
    backend = "file"
    path    = "$WORK/ext4/ns.img"
  }
  namespace "2" {
    backend = "file"
    path    = "$WORK/tmpfs/ns.img"
  }
}
EOF
	out/nvmetd --config "$WORK/nvmetd.hcl" --control-socket none > "$OUT/nvmetd-host.log" 2>&1 &
	NVMETD_PID=$!
	for _ in $(seq 100); do grep -q '\blistening\b' "$OUT/nvmetd-host.log" && break; sleep 0.1; done
	grep -q '\blistening\b' "$OUT/nvmetd-host.log" || { cat "$OUT/nvmetd-host.log"; echo "nvmetd did not start" >&2; exit 1; }
	nsid=0
	for fs in ext4 tmpfs; do
		nsid=$((nsid + 1))
		for job in $JOBS; do
			echo "-- $fs $job: direct"
			fio_run "host-$fs-direct-$job" --name="$job" --filename="$WORK/$fs/ns.img" --ioengine=libaio --direct=1 --rw="$job" --size="${SIZE_MB}m"
			echo "-- $fs $job: nvmetd"
			t0=$(cpu_ticks "$NVMETD_PID")
			fio_run "host-$fs-nvmetd-$job" --ioengine=external:"$ROOT/out/fio-nvmeof.so" --traddr=127.0.53.1 --trsvcid=4457 --host_traddr=127.0.53.2 --subnqn="$NQN" --nsid=$nsid --nr_io_queues=1 \
				--name="$job" --rw="$job" --size="${SIZE_MB}m"
			echo $(( $(cpu_ticks "$NVMETD_PID") - t0 )) > "$OUT/host-$fs-nvmetd-$job.tgt"
		done
	done
	kill "$NVMETD_PID"; wait "$NVMETD_PID" 2>/dev/null || true; NVMETD_PID=""
fi

if [[ " $PARTS " == *" guest "* ]]; then
	KPEER_DIR="${KPEER_DIR:-$(cd .. && pwd)/shared/kernel-peer}"
	[ -x "$KPEER_DIR/run.sh" ] || { echo "no kernel-peer at $KPEER_DIR" >&2; exit 1; }
	echo "== guest (Linux 6.12, QEMU TCG, $SMP vCPUs): null_blk 10 ms, ${RUNTIME}s per job"
	SHARE="$OUT/share"
	rm -rf "$SHARE"
	mkdir -p "$SHARE/bin" "$SHARE/lib"
	cp out/nvmetd "$SHARE/bin/"
	cp out/fio-nvmeof.so "$SHARE/lib/"
	rc=0
	KPEER_KERNEL=6.12 "$KPEER_DIR/run.sh" --share "$SHARE" --smp "$SMP" --timeout $((600 + 4 * RUNTIME)) \
		--env BB_RUNTIME_S="$RUNTIME" --env BB_QD="$QD" \
		"$ROOT/scripts/bench-backends-guest.sh" > "$OUT/guest-run.log" 2>&1 || rc=$?
	if [ "$rc" != 0 ]; then
		tail -n 30 "$OUT/guest-run.log"
		tail -n 30 "$SHARE/out/a/script.log" 2>/dev/null || true
		echo "guest part failed: status $rc" >&2
		exit 1
	fi
	for job in $JOBS; do
		cp "$SHARE/out/a/direct-$job.json" "$OUT/guest-nullb-direct-$job.json"
		cp "$SHARE/out/a/nvmetd-$job.json" "$OUT/guest-nullb-nvmetd-$job.json"
		if [ -f "$SHARE/out/a/nvmetd-tcp-$job.json" ]; then
			cp "$SHARE/out/a/direct-$job.json" "$OUT/guest-nullb-tcp-direct-$job.json"
			cp "$SHARE/out/a/nvmetd-tcp-$job.json" "$OUT/guest-nullb-tcp-nvmetd-$job.json"
		fi
	done
	cp "$SHARE/out/a/nvmetd-usage.txt" "$OUT/guest-nvmetd-usage.txt"
fi

python3 - "$OUT" "$(getconf CLK_TCK)" <<'EOF' | tee "$OUT/bench-backends.txt"
import json, os, sys
out, hz = sys.argv[1], int(sys.argv[2])

def fio(name):
    p = os.path.join(out, name + ".json")
    if not os.path.exists(p):
        return None
    txt = open(p).read()
    j = json.loads(txt[txt.index("{"):])  # fio may print notes before the JSON
    r = j["jobs"][0]
    io = r["read"]["iops"] + r["write"]["iops"]
    n = r["read"]["total_ios"] + r["write"]["total_ios"]
    lat = (r["read"]["clat_ns"]["mean"] if r["read"]["total_ios"] else r["write"]["clat_ns"]["mean"]) / 1000
    return io, n, lat

def num(name):
    p = os.path.join(out, name)
    return float(open(p).read().split()[0]) if os.path.exists(p) else None

guest_ticks, guest_busy = {}, {}
p = os.path.join(out, "guest-nvmetd-usage.txt")
if os.path.exists(p):
    for line in open(p):
        f = line.split()
        guest_ticks[f[0]] = int(f[4]) / int(f[2])
        if len(f) > 6:
            guest_busy[f[0]] = f[6]
media_ticks = {"nullb": "", "nullb-tcp": "tcp-"}

print(f"{'row':34} {'direct IOPS':>12} {'nvmetd IOPS':>12} {'ratio':>6} {'direct lat':>11} {'nvmetd lat':>11} {'CPU us/IO direct':>17} {'CPU us/IO nvmetd':>17}")
for where, media in (("host", ("ext4", "tmpfs")), ("guest", ("nullb", "nullb-tcp"))):
    for m in media:
        for job in ("randread", "randwrite"):
            d, o = fio(f"{where}-{m}-direct-{job}"), fio(f"{where}-{m}-nvmetd-{job}")
            if not d or not o:
                continue
            row = f"{where} {m} {job} 4k QD32"
            cd = num(f"{where}-{m}-direct-{job}.cpu")
            co = num(f"{where}-{m}-nvmetd-{job}.cpu")
            tt = num(f"{where}-{m}-nvmetd-{job}.tgt")
            cpu_d = f"{cd * 1e6 / d[1]:.1f}" if cd is not None and d[1] else "-"
            if co is not None and tt is not None and o[1]:
                cpu_o = f"{(co + tt / hz) * 1e6 / o[1]:.1f}"
            elif media_ticks.get(m, "") + job in guest_ticks and o[1]:
                k = media_ticks.get(m, '') + job
                cpu_o = f"{guest_ticks[k] * 1e6 / o[1]:.1f} (tgt)"
                if k in guest_busy:
                    # All the guest's vCPUs: how near the row is to CPU-bound.
                    cpu_o += f", guest {guest_busy[k]}% busy"
            else:
                cpu_o = "-"
            print(f"{row:34} {d[0]:12.0f} {o[0]:12.0f} {o[0] / d[0]:6.2f} {d[2]:9.0f}us {o[2]:9.0f}us {cpu_d:>17} {cpu_o:>17}")
EOF
echo "results: $OUT"
