# shellcheck shell=bash
# ecn.sh - sourced by guest scripts: a congested switch port in front of the
# guest. eth0's incoming traffic is redirected to ifb0, whose root is a tbf
# at ECN_MARK_RATE with a red child that marks ECN-capable packets CE (and
# drops Not-ECT ones) once its queue holds a few packets, so the guest's
# rxe receives CE-marked RoCEv2 packets from an ECN-capable sender. tcpdump
# on ifb0 records them as marked (it sees them after the qdisc) in
# $KPEER_OUT/ecn-ifb0.pcap.
#
# ecn_mark_on: set it up (status 1 if it cannot).
# ecn_mark_report: stop the capture, print the qdisc's counters, and a
#   PASS: line with the number of CE marks (FAIL: when there were none).

ecn_mark_on() {
  local rate=${ECN_MARK_RATE:-20mbit} m
  for m in ifb sch_ingress cls_matchall act_mirred sch_tbf sch_red; do
    modprobe "$m" || { echo "FAIL: modprobe $m"; return 1; }
  done
  ip link add ifb0 type ifb 2>/dev/null
  ip link set ifb0 up &&
    tc qdisc add dev eth0 handle ffff: ingress &&
    tc filter add dev eth0 parent ffff: matchall action mirred egress redirect dev ifb0 &&
    tc qdisc add dev ifb0 root handle 1: tbf rate "$rate" burst 16k latency 200ms &&
    tc qdisc add dev ifb0 parent 1: handle 10: red limit 200000 min 4000 max 12000 avpkt 1100 burst 5 \
      probability 0.5 bandwidth "$rate" ecn || { echo "FAIL: ingress qdisc"; return 1; }
  tcpdump -i ifb0 -c 40000 -w "${KPEER_OUT:-/tmp}/ecn-ifb0.pcap" udp port 4791 >/dev/null 2>&1 &
  ECN_TCPDUMP=$!
  echo "CE marking on eth0's ingress: tbf $rate + red ecn (ifb0)"
}

ecn_mark_report() {
  [ -n "${ECN_TCPDUMP:-}" ] && { kill -INT "$ECN_TCPDUMP"; wait "$ECN_TCPDUMP"; }
  tc -s qdisc show dev ifb0
  local marked
  marked=$(tc -s qdisc show dev ifb0 | awk '$1 == "marked" {print $2}')
  if [ "${marked:-0}" -gt 0 ]; then
    echo "PASS: the bottleneck marked $marked packets CE"
  else
    echo "FAIL: the bottleneck marked no packet CE (the sender is not ECN-capable, or no queue built)"
  fi
}
