#!/bin/bash
# gateways.sh NVMETD CFGDIR ADDR1 [ADDR2 ...] - kernel-peer --host-cmd that runs
# one nvmetd per address (gateway i = ADDRi, configuration CFGDIR/gwi.hcl,
# log $KPEER_SHARE/out/gwi.log) and acts on the guest's requests
# (guest/gateways.sh):
#
#   the guest writes $KPEER_SIGNAL/gw-req-<n> (n = 1, 2, ... in order) holding
#     KILL i        SIGKILL gateway i (a crash), wait for it to exit
#     START i       start gateway i again
#     QUIT i        SIGQUIT gateway i: its goroutines' stacks go to its log
#                   (what a hung run reports), and it exits
#     HUP i NAME    copy CFGDIR/NAME.hcl over CFGDIR/gwi.hcl, SIGHUP gateway i
#                   (a reload), wait until its log says the reload was applied
#   and this script answers with $KPEER_SIGNAL/gw-done-<n>: "ok ..." or
#   "error ...". $KPEER_SIGNAL/dump (the guest's watchdog) makes every
#   gateway dump its goroutines (SIGQUIT), answered by $KPEER_SIGNAL/dumped;
#   so does a session that ends before the guest released the gateways.
#
# Addresses other than the bridge's own ($KPEER_HOST_ADDR) are added to the
# bridge first: this runs inside the kernel-peer network namespace.
set -u
BIN=${1:?usage: gateways.sh NVMETD CFGDIR ADDR1 [ADDR2 ...]}
CFGDIR=${2:?usage: gateways.sh NVMETD CFGDIR ADDR1 [ADDR2 ...]}
shift 2
ADDRS=("$@")
SIGNAL=${KPEER_SIGNAL:?KPEER_SIGNAL not set}
OUT=${KPEER_SHARE:?KPEER_SHARE not set}/out
mkdir -p "$OUT"
declare -A PID
# STALL_S: a guest whose steps stop for this long (more than its own
# watchdog's STEP_WAIT_S) is taken as stalled as a whole.
STALL_S=${STALL_S:-480}
# nvmetd's log lines at the end of a reload (cmd/nvmetd reload).
RELOADED='configuration reloaded|reload refused|reload applied, but'

say() { echo "[gateways $(date +%T.%3N)] $*"; }
start() {
  local i=$1
  "$BIN" --config "$CFGDIR/gw$i.hcl" >> "$OUT/gw$i.log" 2>&1 &
  PID[$i]=$!
  say "gateway $i (${ADDRS[$((i - 1))]}) started, pid ${PID[$i]}"
}
# stop I SIG: signal gateway I and wait (10 s, then SIGKILL) for it to exit.
stop() {
  local i=$1 sig=$2 pid=${PID[$1]:-} rc
  [ -n "$pid" ] || { say "gateway $i: not running"; return 1; }
  kill "-$sig" "$pid" 2>/dev/null
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  wait "$pid"
  rc=$?
  PID[$i]=""
  say "gateway $i: exit status $rc (after SIG$sig)"
}
# reload I NAME: install CFGDIR/NAME.hcl as gateway I's configuration and
# SIGHUP it; wait (20 s) for one more end-of-reload line in its log.
reload() {
  local i=$1 name=$2 pid=${PID[$1]:-} before n
  [ -n "$pid" ] || { echo "error: gateway $i not running"; return; }
  [ -f "$CFGDIR/$name.hcl" ] || { echo "error: no $CFGDIR/$name.hcl"; return; }
  before=$(grep -c -E "$RELOADED" "$OUT/gw$i.log")
  cp "$CFGDIR/$name.hcl" "$CFGDIR/gw$i.hcl.tmp" && mv "$CFGDIR/gw$i.hcl.tmp" "$CFGDIR/gw$i.hcl"
  kill -HUP "$pid"
  for _ in $(seq 200); do
    n=$(grep -c -E "$RELOADED" "$OUT/gw$i.log")
    [ "$n" -gt "$before" ] && break
    sleep 0.1
  done
  if grep -E "$RELOADED" "$OUT/gw$i.log" | tail -n1 | grep -qv 'configuration reloaded'; then
    echo "error: gateway $i: $name: $(grep -E "$RELOADED" "$OUT/gw$i.log" | tail -n1)"
  elif [ "$n" -gt "$before" ]; then
    echo "ok: gateway $i reloaded $name"
  else
    echo "error: gateway $i did not log a reload of $name within 20 s"
  fi
}
# dump: SIGQUIT every running gateway, so that its goroutines' stacks go to
# its log.
dump() {
  local i
  for i in "${!PID[@]}"; do [ -n "${PID[$i]}" ] && stop "$i" QUIT; done
}
# shutdown: stop the gateways; a guest that never finished (no
# $SIGNAL/release: it hung and the session timed out) gets their
# goroutines' stacks first (best effort: run.sh kills the process group a
# second after its TERM).
shutdown() {
  say "stopping"
  if [ ! -e "$SIGNAL/release" ] && [ ! -e "$SIGNAL/dumped" ]; then
    say "the guest did not finish: dumping the gateways' goroutines"
    dump
  fi
  for i in "${!PID[@]}"; do [ -n "${PID[$i]}" ] && stop "$i" TERM; done
  exit 0
}
trap shutdown TERM INT

for a in "${ADDRS[@]}"; do
  if [ "$a" != "${KPEER_HOST_ADDR:-192.0.2.1}" ]; then
    ip addr add "$a/24" dev "${KPEER_BRIDGE:?KPEER_BRIDGE not set}" || say "ip addr add $a failed"
  fi
done
for i in $(seq ${#ADDRS[@]}); do start "$i"; done

n=1
while :; do
  if [ -e "$SIGNAL/gw-req-$n" ]; then
    read -r op i name < "$SIGNAL/gw-req-$n"
    say "request $n: $op ${i:-} ${name:-}"
    case "$op" in
      KILL) if stop "$i" KILL; then res="ok: gateway $i killed"; else res="error: gateway $i not running"; fi ;;
      QUIT) if stop "$i" QUIT; then res="ok: gateway $i dumped its goroutines to gw$i.log"; else res="error: gateway $i not running"; fi ;;
      START) if [ -z "${PID[$i]:-}" ]; then start "$i"; res="ok: gateway $i started, pid ${PID[$i]}"; else res="error: gateway $i already running"; fi ;;
      HUP) res=$(reload "$i" "$name") ;;
      *) res="error: unknown request '$op'" ;;
    esac
    say "request $n: $res"
    echo "$res" > "$SIGNAL/gw-done-$n.tmp" && mv "$SIGNAL/gw-done-$n.tmp" "$SIGNAL/gw-done-$n"
    n=$((n + 1))
  fi
  if [ ! -e "$SIGNAL/dumped" ]; then
    why=""
    if [ -e "$SIGNAL/dump" ]; then
      why="the guest's watchdog reports a hang"
    elif [ -e "$SIGNAL/progress" ] && [ ! -e "$SIGNAL/release" ] &&
      [ $(( $(date +%s) - $(stat -c %Y "$SIGNAL/progress") )) -gt "$STALL_S" ]; then
      why="no step of the guest for $STALL_S s (the whole guest stalls?)"
    fi
    if [ -n "$why" ]; then
      say "$why: dumping the gateways' goroutines"
      dump
      touch "$SIGNAL/dumped"
    fi
  fi
  for i in "${!PID[@]}"; do
    if [ -n "${PID[$i]}" ] && ! kill -0 "${PID[$i]}" 2>/dev/null; then
      wait "${PID[$i]}"
      say "gateway $i exited by itself with status $?"
      PID[$i]=""
    fi
  done
  sleep 0.2 &
  wait $!
done
