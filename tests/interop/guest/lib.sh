# shellcheck shell=bash
# lib.sh - sourced by the guest scripts that run our binaries inside kernel-peer
# guests (issue 10): `. /share/interop/guest/lib.sh`. The Go tests lay out the
# share (tests/interop/guests.go): /share/bin holds the binaries built for the
# guests, /share/interop our scripts, /share/cfg configuration files.
#
# Gives: step, pass, failc (counts in NFAIL), abort, run, ts, install_bins,
# wait_signal, put_signal, rxe (kernel-peer's rxe-up.sh, once).

NFAIL=${NFAIL:-0}
SIGNAL="${KPEER_SIGNAL:-/tmp/kpeer-signal}"
OUT="${KPEER_OUT:-/tmp}"
INTEROP="${INTEROP:-/share/interop}"
mkdir -p "$SIGNAL" "$OUT"

ts() { cut -d' ' -f1 /proc/uptime; }
step() { echo; echo "=== $* [t=$(ts)s]"; }
pass() { echo "PASS: $*"; }
info() { echo "INFO: $*"; }
failc() { echo "FAIL: $*"; NFAIL=$((NFAIL + 1)); }
abort() { failc "$*"; exit 1; }
run() { echo "\$ $*"; "$@"; }

# install_bins: copy /share/bin/* to /usr/local/bin, so they run from the
# guest's memory and not over 9p, and print what they link.
install_bins() {
  local f
  for f in /share/bin/*; do
    [ -f "$f" ] || continue
    install -m 0755 "$f" "/usr/local/bin/$(basename "$f")" || abort "install $f"
    if ldd "/usr/local/bin/$(basename "$f")" 2>&1 | grep -q 'not found'; then
      ldd "/usr/local/bin/$(basename "$f")"
      abort "$(basename "$f"): shared libraries missing in the guest"
    fi
  done
  ls -l /usr/local/bin
}

# rxe: bring up rxe0 on eth0 (kernel-peer's guest/rxe-up.sh), once.
rxe() {
  [ "${RXE_UP:-0}" = 1 ] && return 0
  step "rxe"
  # shellcheck source=/dev/null
  . "${KPEER_LIB:-/share/.kpeer/lib}/rxe-up.sh" || abort "rxe setup"
}

# put_signal NAME [TEXT]: create $SIGNAL/NAME atomically.
put_signal() {
  printf '%s\n' "${2:-$(hostname) $(ts)}" > "$SIGNAL/$1.tmp" && mv "$SIGNAL/$1.tmp" "$SIGNAL/$1"
}

# wait_signal NAME SECONDS: wait for $SIGNAL/NAME; fails on timeout or when
# $SIGNAL/abort appears (the other guest failed).
wait_signal() {
  local name=$1 end=$(( $(date +%s) + $2 ))
  while [ ! -e "$SIGNAL/$name" ]; do
    if [ -e "$SIGNAL/abort" ]; then echo "aborted while waiting for $name: $(cat "$SIGNAL/abort")"; return 2; fi
    if [ "$(date +%s)" -ge "$end" ]; then echo "timed out after $2 s waiting for $name"; return 1; fi
    sleep 0.2
  done
  return 0
}

# proc_sample PID: "rss_kib threads" of a process.
proc_sample() {
  awk '/^VmRSS:/ { r = $2 } /^Threads:/ { t = $2 } END { print r + 0, t + 0 }' "/proc/$1/status" 2>/dev/null
}
