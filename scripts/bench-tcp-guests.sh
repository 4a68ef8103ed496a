#!/usr/bin/env bash
# bench-tcp-guests.sh - the guest comparison of issue 25: scripts/bench-guests.sh
# over NVMe/TCP (the kernel's nvme-tcp host in guest b against the kernel's
# nvmet-tcp and against an nvmetd TCP port in guest a, the same null
# backing), 4 KiB random read QD32 unless -jobs says otherwise. The goal:
# nvmetd >= 1.0x the kernel's IOPS. Other arguments go to bench-guests.sh.
#
# usage: sudo scripts/bench-tcp-guests.sh [-quick] [-jobs "rr4k-qd32 rr4k-qd1 sr128k"] [-out DIR]
exec "$(dirname "$0")/bench-guests.sh" -transport tcp -jobs rr4k-qd32 "$@"
