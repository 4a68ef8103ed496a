#!/bin/bash
# seq.sh - several of our guest scripts one after the other in one boot, so
# that scenarios share the 30-60 s a TCG guest needs to come up. Guest a runs
# the scripts named in SEQ_A, guest b those in SEQ_B (names of files in
# /share/interop/guest), pairwise: the i-th of a runs against the i-th of b.
# Each part's output goes to $KPEER_OUT/part-<i>-<name>.log and into this log,
# followed by "PART <i> <name>: exit N". Every part runs even when an earlier
# one failed; the exit status is the first non-zero one.
set -u
INTEROP="${INTEROP:-/share/interop}"
OUT="${KPEER_OUT:-/tmp}"
if [ "${KPEER_GUEST:-a}" = a ]; then list="${SEQ_A:?}"; else list="${SEQ_B:?}"; fi
rc=0 i=0
for s in $list; do
  i=$((i + 1))
  echo "=== PART $i $s [t=$(cut -d' ' -f1 /proc/uptime)s]"
  bash "$INTEROP/guest/$s" > "$OUT/part-$i-$s.log" 2>&1
  r=$?
  cat "$OUT/part-$i-$s.log"
  echo "PART $i $s: exit $r [t=$(cut -d' ' -f1 /proc/uptime)s]"
  [ "$rc" = 0 ] && rc=$r
done
exit "$rc"
