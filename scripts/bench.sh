#!/usr/bin/env bash
# The side-by-side benchmark, in one run on loopback: UDP ceilings, fio through
# nbdkit's memory plugin (fio's nbd engine), and fio through our NVMe-oF engine
# against nvmetd. Prints one table, writes bench-results.json and
# bench-results.png (dated copies under bench-out/).
#
#   ./scripts/bench.sh            # 10 s per job, about 3 minutes
#   ./scripts/bench.sh -quick     # 3 s per job
#   ./scripts/bench.sh -smoke     # 1 s per job: does everything run?
#
# Other flags go to the runner: ./scripts/bench.sh -h lists them.
# Needs fio and nbdkit; as root this script installs them with apt-get.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v fio >/dev/null || missing+=(fio)
command -v nbdkit >/dev/null || missing+=(nbdkit)
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
		echo "== apt-get install ${missing[*]}" >&2
		export DEBIAN_FRONTEND=noninteractive
		apt-get install -y "${missing[@]}" >&2 ||
			{ apt-get update >&2 && apt-get install -y "${missing[@]}" >&2; }
	else
		echo "bench.sh: ${missing[*]} not installed: apt-get install ${missing[*]}" >&2
		exit 3
	fi
fi

# HOOK (nvmeof side): once the nvmeof fio engine and nvmetd build, build them
# here and pass -nvmeof-engine PATH -nvmetd PATH (see bench/runner/nvmeof.go).
# Until then the runner reports the nvmeof rows as "not run".

exec go run ./bench/cmd/nvmeof-bench "$@"
