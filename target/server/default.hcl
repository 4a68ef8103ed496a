# nvmetd's embedded default: one memory-backed namespace on 127.0.0.1:4420
# over the soft RoCEv2 provider, open to any host. Used when no --config
# is given. The provider is soft, not auto: the self-test's host side is a
# soft device too. Open to any host, so loopback addresses only
# (TestDefaultLoopbackOnly; nvmetd refuses to serve it otherwise).
log_level = "info"

port "default" {
  transport = "rdma"
  provider  = "soft"
  address   = "127.0.0.1"
  service   = 4420
}

subsystem "nqn.2026-11.io.nvmeof:default" {
  ports          = ["default"]
  allow_any_host = true
  serial         = "NVMEOF0001"
  model          = "nvmeof"

  namespace "1" {
    backend    = "memory"
    size       = "1GiB"
    block_size = 512
  }
}
