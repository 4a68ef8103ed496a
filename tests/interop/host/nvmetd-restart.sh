#!/bin/bash
# nvmetd-restart.sh NVMETD CONFIG - kernel-peer --host-cmd wrapper that runs
# nvmetd and restarts it when the guest asks (guest/nvmetd-full.sh, step
# "restart"):
#
#   the guest writes $KPEER_SIGNAL/restart-target holding a signal name
#   (KILL: simulate a crash, TERM: clean shutdown); this script removes it,
#   sends the signal to nvmetd by PID, waits for it to exit (10 s, then
#   SIGKILL), starts it again with the same configuration and writes
#   $KPEER_SIGNAL/target-restarted-<n> (n counts from 1).
#
# Every stop is logged as "restart <n>: nvmetd exit status N (after SIGx)";
# on SIGTERM/SIGINT (run.sh stopping the host command) nvmetd is stopped
# with SIGTERM ("final stop: ..."). A shutdown that hangs for 10 s gets
# SIGQUIT, so the log shows where it hung.
set -u
BIN=${1:?usage: nvmetd-restart.sh NVMETD CONFIG}
CFG=${2:?usage: nvmetd-restart.sh NVMETD CONFIG}
SIGNAL=${KPEER_SIGNAL:?KPEER_SIGNAL not set}
pid=""

say() { echo "[nvmetd-restart $(date +%T.%3N)] $*"; }
start() {
  "$BIN" --config "$CFG" &
  pid=$!
  say "nvmetd started, pid $pid"
}
# stop WHAT SIG: signal nvmetd, wait for it to exit and log its exit status
# as "WHAT: nvmetd exit status N (after SIGsig)". A hung nvmetd gets SIGQUIT
# after 10 s (the Go runtime prints every goroutine's stack) and SIGKILL 3 s
# later.
stop() {
  local what=$1 sig=$2 rc
  kill "-$sig" "$pid" 2>/dev/null
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    say "$what: nvmetd (pid $pid) still running 10 s after SIG$sig: SIGQUIT (goroutine dump follows)"
    kill -QUIT "$pid"
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  fi
  wait "$pid"
  rc=$?
  say "$what: nvmetd exit status $rc (after SIG$sig)"
}
shutdown() {
  say "stopping"
  [ -n "$pid" ] && stop "final stop" TERM
  exit 0
}
trap shutdown TERM INT

start
n=0
while :; do
  if [ -e "$SIGNAL/restart-target" ]; then
    sig=$(tr -dc A-Z < "$SIGNAL/restart-target")
    rm -f "$SIGNAL/restart-target"
    n=$((n + 1))
    case "$sig" in KILL | TERM | INT) ;; *) sig=KILL ;; esac
    say "restart $n: SIG$sig to nvmetd pid $pid"
    stop "restart $n" "$sig"
    start
    echo "nvmetd restarted after SIG$sig: new pid $pid at $(date +%T.%3N)" > "$SIGNAL/target-restarted-$n.tmp"
    mv "$SIGNAL/target-restarted-$n.tmp" "$SIGNAL/target-restarted-$n"
  fi
  if ! kill -0 "$pid" 2>/dev/null; then
    wait "$pid"
    say "nvmetd exited by itself with status $?"
    exit 1
  fi
  sleep 0.2 &
  wait $!
done
