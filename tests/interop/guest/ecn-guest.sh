#!/bin/bash
# ecn-guest.sh - RoCEv2 congestion control against the kernel's rxe, in one
# guest whose incoming traffic passes a bottleneck that marks ECN (ecn.sh):
#   1. kernel-peer's kernel-host.sh (nvme-rdma) against nvmetd on the host
#      side, whose soft port runs congestion control (ECT data, CE marks
#      arriving at rxe);
#   2. initiator-target.sh: the kernel target for our host (kpeer-host with
#      -congestion, the host test), which signals target-ready and waits for
#      release.
# Then the marks are reported (ecn_mark_report). env: as kernel-host.sh and
# initiator-target.sh, ECN_MARK_RATE.
set -u
. /share/interop/guest/lib.sh
. /share/interop/guest/ecn.sh
ecn_mark_on || abort "no CE marking"
step "kernel host against nvmetd (congestion control on)"
bash "$KPEER_LIB/kernel-host.sh"
rc=$?
[ "$rc" = 0 ] || failc "kernel-host.sh exit status $rc"
# kernel-host.sh always signals release (for a kernel-target guest): not
# ours, which must wait for the host test.
rm -f "$SIGNAL/release"
for _ in $(seq 50); do [ -z "$(rdma resource show qp 2>/dev/null | grep 'type RC')" ] && break; sleep 0.2; done
step "kernel target for our host (congestion control on)"
bash /share/interop/guest/initiator-target.sh
rc=$?
[ "$rc" = 0 ] || failc "initiator-target.sh exit status $rc"
step "CE marks"
ecn_mark_report
[ "$NFAIL" = 0 ] && echo "ECN RESULT: PASS" || echo "ECN RESULT: FAIL ($NFAIL)"
[ "$NFAIL" = 0 ]
