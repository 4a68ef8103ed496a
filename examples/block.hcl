# A block device exported whole: its logical block size becomes the
# namespace's, and hosts may read its SMART/health data. The device is
# opened O_EXCL (not while mounted or used by another exporter) and with
# O_DIRECT.
#
# As shipped it exports /dev/nullb0, the kernel's null_blk test device
# (what nvmetcli's examples use):
#
#   sudo modprobe null_blk nr_devices=1
#   sudo nvmetd --config examples/block.hcl
#
# For a real disk, set path to its stable name (ls -l /dev/disk/by-id/):
# the host then owns everything on it.

port "p0" {
  address = "127.0.0.1"
  service = 4420
}

subsystem "nqn.2026-11.io.nvmeof:block" {
  ports          = ["p0"]
  allow_any_host = true

  namespace "1" {
    # backend: block is the default for paths under /dev/.
    backend = "block"
    path    = "/dev/nullb0"
    # size: left out, the whole device; smaller exports only the start.
    # buffered_io: true goes through the page cache instead of O_DIRECT.
    # queue_depth: I/Os in flight to the device at once (default 128).
  }
}
