#!/bin/bash
# bench-backends-guest.sh - the guest half of scripts/bench-backends.sh, in a
# kernel-peer guest (KPEER_KERNEL=6.12): null_blk with 10 ms per I/O and any
# number in flight, measured (1) by fio with libaio O_DIRECT on /dev/nullb0
# and (2) by fio through our engine against nvmetd exporting /dev/nullb0 as
# a block namespace on the soft provider over the guest's loopback.
# fio's JSON goes to $KPEER_OUT/<side>-<job>.json, nvmetd's CPU ticks to
# $KPEER_OUT/nvmetd-usage.txt.
#
# With tcp in BB_TRANSPORTS the engine also runs over NVMe/TCP to a TCP port
# of the same nvmetd (nvmetd-tcp-<job>.json, usage lines tcp-<job>).
#
# env: BB_RUNTIME_S (10)  BB_QD (32)  BB_JOBS ("randread randwrite")
#   BB_COMPLETION_NSEC (10000000)  BB_TRANSPORTS ("rdma tcp")
set -u
RUNTIME="${BB_RUNTIME_S:-10}"
QD="${BB_QD:-32}"
JOBS="${BB_JOBS:-randread randwrite}"
NSEC="${BB_COMPLETION_NSEC:-10000000}"
TRANSPORTS="${BB_TRANSPORTS:-rdma tcp}"
OUT="${KPEER_OUT:?}"
ENGINE=/share/lib/fio-nvmeof.so
NQN=nqn.2026-11.io.nvmeof:bench-backends
fail=0
step() { echo "== $*"; }

step "$(uname -r), $(nproc) CPUs"
ip link set lo up 2>/dev/null
modprobe null_blk nr_devices=1 irqmode=2 completion_nsec="$NSEC" gb=4 bs=512 hw_queue_depth=256 ||
	{ echo "FAIL: modprobe null_blk"; exit 1; }
for _ in $(seq 50); do [ -b /dev/nullb0 ] && break; sleep 0.1; done
[ -b /dev/nullb0 ] || { echo "FAIL: no /dev/nullb0"; exit 1; }
echo "null_blk: irqmode=2 completion_nsec=$NSEC ($(cat /sys/block/nullb0/queue/nr_requests) requests per queue)"

# (1) fio directly on the device.
for job in $JOBS; do
	step "direct: fio libaio O_DIRECT $job 4k QD$QD on /dev/nullb0, ${RUNTIME}s"
	fio --name="$job" --filename=/dev/nullb0 --ioengine=libaio --direct=1 --rw="$job" --bs=4k \
		--iodepth="$QD" --runtime="$RUNTIME" --time_based --size=1g \
		--output-format=json --output="$OUT/direct-$job.json" || { echo "FAIL: fio direct $job"; fail=1; }
done

# (2) nvmetd exporting it, fio through our engine on loopback.
cat > /tmp/nvmetd.hcl <<EOF
log_level = "info"
port "lo" {
  transport = "rdma"
  provider  = "soft"
  address   = "127.0.0.1"
  service   = 4420
}
port "lotcp" {
  transport = "tcp"
  address   = "127.0.0.1"
  service   = 4421
}
subsystem "$NQN" {
  ports          = ["lo", "lotcp"]
  allow_any_host = true
  namespace "1" {
    backend     = "block"
    path        = "/dev/nullb0"
    queue_depth = 128
  }
}
EOF
/share/bin/nvmetd --config /tmp/nvmetd.hcl > "$OUT/nvmetd.log" 2>&1 &
pid=$!
ok=0
for _ in $(seq 300); do [ "$(grep -c '\blistening\b' "$OUT/nvmetd.log")" -ge 2 ] && { ok=1; break; }; kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
[ "$ok" = 1 ] || { tail -n 30 "$OUT/nvmetd.log"; echo "FAIL: nvmetd did not start"; exit 1; }
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
# The guest's CPU use over a run: busy and total jiffies of all CPUs.
cpustat() { awk '/^cpu /{print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat; }
for job in $JOBS; do
	for tr in $TRANSPORTS; do
		case "$tr" in
		rdma) where=(--transport=rdma --traddr=127.0.0.1 --trsvcid=4420 --host_traddr=127.0.0.2) name=$job file=nvmetd-$job ;;
		tcp) where=(--transport=tcp --traddr=127.0.0.1 --trsvcid=4421) name=tcp-$job file=nvmetd-tcp-$job ;;
		*) echo "FAIL: unknown transport $tr"; fail=1; continue ;;
		esac
		step "nvmetd: fio through the engine over $tr, $job 4k QD$QD, ${RUNTIME}s"
		t0=$(ticks)
		read -r b0 a0 < <(cpustat)
		fio --ioengine=external:"$ENGINE" "${where[@]}" \
			--subnqn="$NQN" --nsid=1 --nr_io_queues=1 --busy_poll=0 \
			--name="$job" --rw="$job" --bs=4k --iodepth="$QD" --runtime="$RUNTIME" --time_based --size=1g \
			--output-format=json --output="$OUT/$file.json" || { echo "FAIL: fio nvmetd $tr $job"; fail=1; }
		read -r b1 a1 < <(cpustat)
		echo "$name ticks_per_s $(getconf CLK_TCK) nvmetd_ticks $(( $(ticks) - t0 )) guest_busy_pct $(( 100 * (b1 - b0) / (a1 - a0) ))" | tee -a "$OUT/nvmetd-usage.txt"
	done
done
kill -TERM "$pid"; wait "$pid"
[ "$fail" = 0 ] && echo "RESULT: PASS" || echo "RESULT: FAIL"
exit "$fail"
