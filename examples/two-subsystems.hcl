# Two subsystems on one port, each with its own allow-list: a host sees
# (in discovery) and connects to only the subsystems that list its host
# NQN (nvme-cli's /etc/nvme/hostnqn; `nvmeof show-hostnqn` prints ours).
#
#   sudo nvmetd --config examples/two-subsystems.hcl
#   nvmeof connect -t rdma -a 127.0.0.1 -n nqn.2026-11.io.nvmeof:db \
#       -q nqn.2014-08.org.nvmexpress:uuid:0b9c9d5e-2f3a-4c1b-8e7d-6a5b4c3d2e1f

port "p0" {
  address = "127.0.0.1"
  service = 4420
}

# Two hosts may use the database subsystem...
subsystem "nqn.2026-11.io.nvmeof:db" {
  ports = ["p0"]
  # allowed_hosts: the host NQNs that may connect; every other host is
  # refused at Fabrics Connect (and not shown the subsystem in discovery).
  allowed_hosts = [
    "nqn.2014-08.org.nvmexpress:uuid:0b9c9d5e-2f3a-4c1b-8e7d-6a5b4c3d2e1f",
    "nqn.2014-08.org.nvmexpress:uuid:7c6d5e4f-3a2b-4c1d-9e8f-0a1b2c3d4e5f",
  ]
  serial = "NVMEOFDB01"

  namespace "1" {
    backend = "memory"
    size    = "256MiB"
  }
  namespace "2" {
    backend = "memory"
    size    = "64MiB"
  }
}

# ...and only the second one the scratch subsystem.
subsystem "nqn.2026-11.io.nvmeof:scratch" {
  ports         = ["p0"]
  allowed_hosts = ["nqn.2014-08.org.nvmexpress:uuid:7c6d5e4f-3a2b-4c1d-9e8f-0a1b2c3d4e5f"]

  namespace "1" {
    # backend: null reads zeroes and drops writes, for benchmarks.
    backend = "null"
    size    = "1TiB"
  }
}
