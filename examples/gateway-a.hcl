# Gateway A of two nvmetd gateways exporting one subsystem over shared
# storage, see docs/gateways.md and docs/ana.md. gateway-b.hcl is the other:
# the same NQN, serial, model and namespace IDs, a disjoint cntlid range,
# and ANA group 1 non-optimized where this one has it optimized.
#
#   sudo nvmetd --config examples/gateway-a.hcl --control-socket /run/nvmetd/a.sock
#   sudo nvmetd --config examples/gateway-b.hcl --control-socket /run/nvmetd/b.sock
#   nvme connect -t rdma -a 127.0.0.1 -s 4420 -n nqn.2026-12.io.nvmeof:gateways
#   nvme connect -t rdma -a 127.0.0.2 -s 4420 -n nqn.2026-12.io.nvmeof:gateways
#   nvme list-subsys     # one subsystem, two paths: optimized, non-optimized
#
# (or `nvmeof connect` twice: one device, two paths.) To move the hosts'
# I/O to gateway B, swap the two states and reload both (SIGHUP), or:
#   nvmetctl --socket /run/nvmetd/a.sock port ana-state gw-a 1 non-optimized
#   nvmetctl --socket /run/nvmetd/b.sock port ana-state gw-b 1 optimized
# On two machines put each machine's address in its port, and the
# namespace on storage both see (one RBD image: README, Ceph RBD).

port "gw-a" {
  address = "127.0.0.1"
  service = 4420
  # ana_group: this gateway's state of an ANA group; the hosts connected
  # here see it for the group's namespaces. Group 1 is optimized unless set.
  ana_group "1" { state = "optimized" }
}

subsystem "nqn.2026-12.io.nvmeof:gateways" {
  ports          = ["gw-a"]
  allow_any_host = true
  # serial, model: the same on every gateway, so hosts see one subsystem.
  serial = "NVMEOFGW0001"
  model  = "nvmeof-gateways"
  # cntlid_min, cntlid_max: disjoint per gateway, since a host's
  # controllers of one subsystem must have distinct IDs.
  cntlid_min = 1
  cntlid_max = 99

  namespace "1" {
    backend = "file"
    path    = "/var/lib/nvmetd/shared.img"
    size    = "1GiB"
    # uuid, nguid: the same on every gateway; written out so that the
    # pairing does not hang on how the gateways derive them.
    # ana_grpid: the namespace's ANA group (1 is the default).
    uuid      = "6b706565-7200-4000-8000-000000000101"
    nguid     = "6b706565-7200-4000-8000-000000000201"
    ana_grpid = 1
  }
}
