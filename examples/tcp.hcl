# One subsystem over NVMe/RDMA and NVMe/TCP at once (docs/tcp.md): hosts
# with RoCE use the rdma port, any other host the tcp one, with nothing to
# install but nvme-cli:
#
#   sudo nvmetd --config examples/tcp.hcl
#   nvme connect -t tcp -a 127.0.0.1 -s 4420 -n nqn.2026-12.io.nvmeof:both
#   nvme connect -t tcp -a 127.0.0.1 -s 4420 -n nqn.2026-12.io.nvmeof:both --hdr-digest --data-digest
#   nvme connect -t rdma -a 127.0.0.1 -s 4420 -n nqn.2026-12.io.nvmeof:both

port "rdma0" {
  transport = "rdma"
  address   = "127.0.0.1"
  service   = 4420
}

# The same address and service: RDMA's 4420 is RoCE (UDP 4791) with RDMA
# CM's port space, TCP's is a TCP port; they do not collide.
port "tcp0" {
  transport = "tcp"
  address   = "127.0.0.1"
  service   = 4420
  # inline_data_size: write data a command carries in its capsule; larger
  # writes are fetched with R2T.
  inline_data_size = 16384
  # connect_timeout: seconds from the TCP connection to its Fabrics Connect.
  connect_timeout = 10
}

subsystem "nqn.2026-12.io.nvmeof:both" {
  ports          = ["rdma0", "tcp0"]
  allow_any_host = true

  namespace "1" {
    backend = "memory"
    size    = "256MiB"
  }
}
