# An RDMA NIC (or the kernel's soft RoCE, rxe) through rdma-core: the
# ibverbs provider, in a binary built with
#
#   CGO_ENABLED=1 go build -tags ibverbs ./cmd/nvmetd
#
# (it links libibverbs and librdmacm: Debian's libibverbs-dev and
# librdmacm-dev to build, rdma-core's libraries to run). Set address to
# the IP address of the RDMA device's netdev (`rdma link`, `ip addr`).
# For a test without a NIC:
#
#   sudo modprobe rdma_rxe
#   sudo rdma link add rxe0 type rxe netdev eth0
#
# and use eth0's address.

port "verbs0" {
  # provider: ibverbs refuses to start without an RDMA device holding
  # address (auto would fall back to the soft provider).
  provider = "ibverbs"
  address  = "192.0.2.10"
  service  = 4420
  # device: pin the rdma-core device when several share the address.
  # device = "rxe0"
  # tos: the IP type of service of the connections, e.g. 106 (DSCP 26
  # with ECN) for a lossless RoCE traffic class.
  # tos = 106
}

subsystem "nqn.2026-11.io.nvmeof:verbs" {
  ports          = ["verbs0"]
  allow_any_host = true

  namespace "1" {
    backend = "memory"
    size    = "1GiB"
  }
}
