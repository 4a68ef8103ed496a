#!/bin/bash
# rping-pair.sh - rping between the two guests over their rxe0, every size in
# both directions, in one boot. Runs in both guests (run.sh ... rping-pair.sh
# rping-pair.sh); guest a runs $RPING_A, guest b $RPING_B (e.g. our cmd/rping
# built with -tags ibverbs against rdmacm-utils' rping).
#
# For each size in RPING_SIZES, first guest a serves and guest b is the
# client, then the other way round. Run k (from 1) uses port RPING_PORT+k:
#   server: $RPING -s -a <own address> -p PORT -C COUNT -S SIZE -V -v
#           (rping's server sizes its buffers with its own -S, so it gets the
#           client's size), then $SIGNAL/rping-k-ready
#   client: waits for rping-k-ready; $RPING -c -a <server> -p PORT -C COUNT
#           -S SIZE -V -v; must exit 0 having printed COUNT pings, no
#           "data mismatch"; then rping-k-client-done
#   server: must exit 0 by itself after the client's disconnect, having
#           served COUNT pings; then rping-k-server-done
# Both guests wait for both markers before run k+1.
#
# env (defaults): RPING_A=rping RPING_B=rping RPING_SIZES="64 1024 65000"
#   RPING_COUNT=20 RPING_PORT=7200 RPING_WAIT_S=240 (per wait)
# Prints PASS:/FAIL: lines and "RESULT: PASS|FAIL".
set -u
# shellcheck source=/dev/null
. "${INTEROP:-/share/interop}/guest/lib.sh"
RPING_A="${RPING_A:-rping}"
RPING_B="${RPING_B:-rping}"
RPING_SIZES="${RPING_SIZES:-64 1024 65000}"
RPING_COUNT="${RPING_COUNT:-20}"
RPING_PORT="${RPING_PORT:-7200}"
RPING_WAIT_S="${RPING_WAIT_S:-240}"
ME="${KPEER_GUEST:-a}"
MYADDR="${KPEER_IP:-192.0.2.2}"
PEERADDR="${KPEER_PEER_ADDR:-192.0.2.3}"
if [ "$ME" = a ]; then RPING=$RPING_A PEER=b; else RPING=$RPING_B PEER=a; fi

finish() {
  rxe_counters 2>/dev/null
  if [ "$NFAIL" = 0 ]; then echo "RESULT: PASS"; else echo "RESULT: FAIL ($NFAIL failed checks)"; fi
  [ "$NFAIL" = 0 ]
  exit $?
}
trap finish EXIT

install_bins
rxe
echo "guest $ME ($MYADDR): rping is '$RPING'; peer $PEER ($PEERADDR)"
$RPING --help 2>&1 | head -n 3

# show OUTFILE: the first and last lines of rping's output, long lines cut.
show() { { head -n 3 "$1"; echo ...; tail -n 3 "$1"; } | cut -c 1-160; }

# serve K SIZE
serve() {
  local k=$1 size=$2 port=$((RPING_PORT + $1)) out=/tmp/rping-$1-server.out pid rc="" n
  step "run $k: server (guest $ME: $RPING), size $size, port $port"
  # shellcheck disable=SC2086
  $RPING -s -a "$MYADDR" -p "$port" -C "$RPING_COUNT" -S "$size" -V -v > "$out" 2>&1 &
  pid=$!
  # Listening: rdma_cm shows the listener on the port (both the kernel's
  # rping and ours on ibverbs go through the kernel's rdma_cm).
  for _ in $(seq 50); do
    rdma resource show cm_id 2>/dev/null | grep -q "src-addr $MYADDR:$port" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if ! kill -0 "$pid" 2>/dev/null; then
    wait "$pid"; rc=$?
    show "$out"
    failc "run $k: server exited before the client came (status $rc)"
    put_signal "rping-$k-ready" "failed"
    put_signal "rping-$k-server-done" "fail"
    return
  fi
  rdma resource show cm_id 2>/dev/null | grep "$MYADDR:$port" || echo "(listener not shown by rdma resource)"
  put_signal "rping-$k-ready"
  if ! wait_signal "rping-$k-client-done" "$RPING_WAIT_S"; then
    kill "$pid" 2>/dev/null; wait "$pid"
    failc "run $k: no client result"
    put_signal "rping-$k-server-done" "fail"
    return
  fi
  # The client has disconnected: the server must finish by itself.
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"; wait "$pid"
    show "$out"
    failc "run $k: server ($RPING) still running 10 s after the client finished"
    put_signal "rping-$k-server-done" "fail"
    return
  fi
  wait "$pid"; rc=$?
  n=$(grep -c '^server ping data: rdma-ping-' "$out")
  show "$out"
  if [ "$rc" = 0 ] && [ "$n" = "$RPING_COUNT" ] && ! grep -q 'mismatch' "$out"; then
    pass "run $k: server guest $ME ($RPING) served $n pings of $size bytes to guest $PEER, exit 0"
  else
    failc "run $k: server guest $ME ($RPING), size $size: exit status $rc, $n pings (want $RPING_COUNT)"
  fi
  put_signal "rping-$k-server-done" "$rc $n"
}

# client K SIZE
client() {
  local k=$1 size=$2 port=$((RPING_PORT + $1)) out=/tmp/rping-$1-client.out rc=1 n=0 try
  step "run $k: client (guest $ME: $RPING), size $size, to $PEERADDR:$port"
  if ! wait_signal "rping-$k-ready" "$RPING_WAIT_S"; then
    failc "run $k: server never ready"
    put_signal "rping-$k-client-done" "fail"
    return
  fi
  for try in 1 2 3; do
    # shellcheck disable=SC2086
    timeout 180 $RPING -c -a "$PEERADDR" -p "$port" -C "$RPING_COUNT" -S "$size" -V -v > "$out" 2>&1
    rc=$?
    n=$(grep -c '^ping data: rdma-ping-' "$out")
    echo "try $try: exit status $rc, $n pings"
    # retry only when nothing was exchanged
    { [ "$rc" = 0 ] || [ "$n" -gt 0 ]; } && break
    show "$out"
    sleep 1
  done
  show "$out"
  # rdma-core's rping client races itself at exit: main destroys the CM
  # event channel while its cm_thread still reads it, and that thread's
  # perror + exit(-1) may win (status 255) after every ping was
  # validated. Only that exact ending is let through.
  if [ "$rc" = 255 ] && [ "$n" = "$RPING_COUNT" ] && [ "$RPING" = rping ] &&
    grep -q '^rdma_get_cm_event: Bad file descriptor' "$out" && ! grep -q 'mismatch' "$out"; then
    info "run $k: rping exited 255 from its own cm_thread/channel teardown race, after all $n pings"
    rc=0
  fi
  if [ "$rc" = 0 ] && [ "$n" = "$RPING_COUNT" ] && ! grep -q 'mismatch' "$out"; then
    pass "run $k: client guest $ME ($RPING) validated $n pings of $size bytes from guest $PEER, exit 0"
  else
    failc "run $k: client guest $ME ($RPING), size $size: exit status $rc, $n pings (want $RPING_COUNT)"
  fi
  put_signal "rping-$k-client-done" "$rc $n"
}

k=0
for size in $RPING_SIZES; do
  for server in a b; do
    k=$((k + 1))
    if [ "$server" = "$ME" ]; then serve "$k" "$size"; else client "$k" "$size"; fi
    wait_signal "rping-$k-client-done" "$RPING_WAIT_S" >/dev/null &&
      wait_signal "rping-$k-server-done" "$RPING_WAIT_S" >/dev/null ||
      abort "run $k: the other guest did not finish"
  done
done
echo "runs: $k"
exit 0
