# One file namespace, open to any host on one port: the smallest useful
# target. nvmetd creates the file (sparse, 1 GiB) and its directory on the
# first start and keeps the data there across restarts.
#
#   sudo nvmetd --config examples/file.hcl
#   nvmeof connect -t rdma -a 127.0.0.1 -s 4420 -n nqn.2026-11.io.nvmeof:file
#
# 127.0.0.1 keeps it on this machine (and needs no root with the soft
# provider); put the address of a NIC here to serve the network, and see
# two-subsystems.hcl for allow-lists. examples/nvmetd.hcl documents every
# attribute.

port "p0" {
  # provider: soft (pure-Go RoCEv2), ibverbs or auto (the default).
  provider = "auto"
  address  = "127.0.0.1"
  service  = 4420
}

subsystem "nqn.2026-11.io.nvmeof:file" {
  ports = ["p0"]
  # allow_any_host: any host NQN may connect. Only sensible on loopback or
  # a trusted network.
  allow_any_host = true

  namespace "1" {
    backend = "file"
    # path: created with its directories when missing (size is needed
    # then); an existing file must be size bytes long (or set grow).
    path = "/var/lib/nvmetd/file.img"
    size = "1GiB"
  }
}
