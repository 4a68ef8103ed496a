#!/usr/bin/env bash
# Builds the nvmeof fio external I/O engine (fio/engine) into a shared object
# that fio loads with ioengine=external:PATH.
#
#   ./scripts/build-fio-engine.sh                 # -> out/fio-nvmeof.so
#   ./scripts/build-fio-engine.sh /tmp/e.so       # -> /tmp/e.so
#   fio --enghelp=$PWD/out/fio-nvmeof.so          # the engine's options
#
# fio ships no development headers, and an external engine must be compiled
# against the headers of the very fio version that loads it (struct
# thread_data, io_u, ioengine_ops and FIO_IOOPS_VERSION), plus the
# config-host.h its ./configure writes. So this script:
#   1. installs fio (and dpkg-dev, gcc) with apt-get when missing (needs root);
#   2. fetches the source of the installed fio version with `apt-get source`,
#      through a private apt configuration (its own deb-src list, made from the
#      system's deb entries, its own lists and cache directories) so the
#      system's apt configuration and lists stay untouched;
#   3. runs fio's ./configure there to write config-host.h;
#   4. builds fio/engine with `go build -buildmode=c-shared -tags fioengine`,
#      the cgo flags pointing at that source tree.
# The source lives in $FIO_SRC_CACHE (default /var/cache/nvmeof/fio-src),
# outside the repository: fio's source is never committed. Steps already
# done are skipped, so a second run only rebuilds the engine.
#
# Environment: FIO_SRC_CACHE (source cache), FIO_SRC (use this fio source
# tree: no apt-get), GO (go binary), NVMEOF_TAGS (more build tags:
# NVMEOF_TAGS=ibverbs builds in the rdma-core provider, for fio's
# provider=ibverbs; it needs libibverbs-dev and librdmacm-dev). Exit
# status: 0 built, 4 fio's source could not be fetched, 1 any other
# failure.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$repo/out/fio-nvmeof.so} # a relative path is the caller's
case $out in /*) ;; *) out=$PWD/$out ;; esac
cd "$repo"

cache=${FIO_SRC_CACHE:-/var/cache/nvmeof/fio-src}
go=${GO:-go}

log() { echo "build-fio-engine: $*" >&2; }
die() { log "$*"; exit 1; }

is_root() { [ "$(id -u)" -eq 0 ]; }

# Exit status 4: fio's source could not be fetched (no network, no deb-src
# for this version); tests skip on it rather than fail.
fetch_failed() { log "$1 failed: cannot fetch fio's source"; exit 4; }

apt_install() {
	is_root || die "$* not installed and not root: apt-get install $*"
	command -v apt-get >/dev/null || die "$* not installed and no apt-get"
	log "apt-get install $*"
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y --no-install-recommends "$@" >&2 ||
		{ apt-get update >&2 && apt-get install -y --no-install-recommends "$@" >&2; }
}

need=()
command -v fio >/dev/null || need+=(fio)
command -v gcc >/dev/null || need+=(gcc libc6-dev)
[ -n "${FIO_SRC:-}" ] || command -v dpkg-source >/dev/null || need+=(dpkg-dev)
[ ${#need[@]} -eq 0 ] || apt_install "${need[@]}"

fio_version=$(fio --version) # fio-3.33
upstream=${fio_version#fio-}

if [ -n "${FIO_SRC:-}" ]; then
	src=$FIO_SRC
else
	# The Debian version of the installed package: 3.33-3, maybe with an epoch.
	debver=$(dpkg-query -W -f='${Version}' fio 2>/dev/null) ||
		die "fio $upstream is not installed from a Debian package; set FIO_SRC to its configured source tree"
	plain=${debver#*:}
	case $plain in
	"$upstream"-* | "$upstream"+* | "$upstream"~*) ;;
	*) die "fio --version says $fio_version but the fio package is $debver" ;;
	esac
	dir=$cache/$plain
	src=$dir/fio-$upstream
	if [ ! -f "$src/fio.h" ]; then
		mkdir -p "$dir"
		priv=$(mktemp -d)
		trap 'rm -rf "$priv"' EXIT
		mkdir -p "$priv/sources.list.d" "$priv/lists/partial" "$priv/cache/archives/partial"
		: >"$priv/sources.list"
		# deb-src entries for the suites the system installs from.
		shopt -s nullglob
		for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
			[ -f "$f" ] || continue
			sed -n 's/^[[:space:]]*deb[[:space:]]/deb-src /p' "$f" >>"$priv/sources.list"
		done
		for f in /etc/apt/sources.list.d/*.sources; do
			awk 'BEGIN { RS=""; ORS="\n\n" }
			     /(^|\n)Types:[^\n]*[[:space:]]deb([[:space:]]|$)/ && !/(^|\n)Enabled:[[:space:]]*no/ {
			         sub(/Types:[^\n]*/, "Types: deb-src"); print }' "$f" >"$priv/sources.list.d/$(basename "$f")"
		done
		shopt -u nullglob
		aptopts=(
			-o "Dir::Etc::SourceList=$priv/sources.list"
			-o "Dir::Etc::SourceParts=$priv/sources.list.d"
			-o "Dir::State::Lists=$priv/lists"
			-o "Dir::Cache=$priv/cache"
			-o "APT::Sandbox::User=root"
		)
		log "apt-get update (private deb-src configuration in $priv)"
		apt-get "${aptopts[@]}" update >&2 || fetch_failed "apt-get update"
		log "apt-get source fio=$debver into $dir"
		(cd "$dir" && apt-get "${aptopts[@]}" source "fio=$debver" >&2) || fetch_failed "apt-get source fio=$debver"
		[ -f "$src/fio.h" ] || die "apt-get source did not unpack $src"
	fi
fi

# Configure as Debian builds its fio (debian/rules: --disable-native
# --prefix=/usr, less the GUI and libnbd, which change no structure an
# engine sees). Of config-host.h, only CONFIG_LIBAIO changes a structure the
# engine uses (the size of the union at the end of struct io_u, not the
# offset of any field the engine touches); libaio-dev makes it match.
configure_flags="--disable-native --prefix=/usr"
if [ "$(cat "$src/.nvmeof-configure" 2>/dev/null)" != "$configure_flags" ]; then
	if [ ! -e /usr/include/libaio.h ]; then
		if is_root; then
			apt_install libaio-dev
		else
			log "warning: libaio-dev is not installed: struct io_u will be smaller than the installed fio's (harmless: its size is not used)"
		fi
	fi
	log "configuring fio in $src ($configure_flags)"
	# The engine compiles against the headers; it links nothing of fio's
	# (fio.h's functions are found in the fio executable at load time).
	(cd "$src" && ./configure $configure_flags >"$src/configure.out" 2>&1) ||
		{ tail -20 "$src/configure.out" >&2; die "fio ./configure failed"; }
	echo "$configure_flags" >"$src/.nvmeof-configure"
fi

mkdir -p "$(dirname "$out")"
log "building $out against $src ($fio_version)"
CGO_ENABLED=1 \
	CGO_CFLAGS="-I$src -include $src/config-host.h -D_GNU_SOURCE -O2 -g" \
	"$go" build -buildmode=c-shared -tags "fioengine${NVMEOF_TAGS:+,$NVMEOF_TAGS}" -trimpath -o "$out" ./fio/engine
rm -f "${out%.so}.h"
log "built $out"
