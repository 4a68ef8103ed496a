# nvmetd configuration: every option, with its default. It starts as it
# is, as root: nvmetd --config examples/nvmetd.hcl (cmd/nvmetd's
# TestExamples starts every file of this directory).
#
# The file maps one-to-one onto the kernel nvmet configfs tree
# (/sys/kernel/config/nvmet): port blocks are ports/, subsystem blocks are
# subsystems/ (namespace blocks inside them are namespaces/), host blocks are
# hosts/. Block labels are quoted strings. Unknown attributes are errors, and
# every error is reported as FILE:LINE:COL with the attribute's name. Each
# comment below starts with the attribute's name in this file; the configfs
# file it stands for follows in parentheses where there is one.
#
# nvmetcli's JSON (nvmetcli save) is accepted too: a file ending in .json.
# Smaller ready configurations: the other files of this directory.

# log_level: trace, debug, info, warn, error or off. Default "info".
# nvmetd --log-level overrides it.
log_level = "info"

# A port: an address the target listens on. The label names it; subsystems
# refer to it by that name.
port "rdma0" {
  # transport (addr_trtype): "rdma" (RoCEv2) or "loop" (in-process, for
  # tests). "tcp" is reserved for later. Default "rdma".
  transport = "rdma"

  # provider: the RDMA implementation (rdma only):
  #   "soft"    pure Go RoCEv2 over UDP port 4791; needs no RDMA hardware,
  #             and no root on loopback addresses (else CAP_NET_RAW).
  #   "ibverbs" rdma-core (libibverbs + librdmacm): an RDMA NIC (ConnectX,
  #             E810, ...) or the kernel's rxe/siw; needs a binary built
  #             with CGO_ENABLED=1 go build -tags ibverbs.
  #   "auto"    ibverbs when this binary has it and an RDMA device holds
  #             address (or device names one), else soft.
  # nvmetd --check reports a provider this binary was built without.
  # Default "auto".
  provider = "auto"

  # device: the rdma-core device to use ("mlx5_0", "rxe0"; see
  # `rdma link` or `ibv_devices`); ibverbs only, and it makes auto mean
  # ibverbs. Default: the device whose GID table holds address.
  # device = "mlx5_0"

  # tos: the IP type of service (DSCP << 2 | ECN, 0..255) of the port's
  # RDMA connections (rdma_cm's RDMA_OPTION_ID_TOS), for example 106
  # (DSCP 26, ECN-capable) for a lossless RoCE traffic class. ibverbs only:
  # the soft provider logs that it ignores it. Default: the kernel's
  # (rdma_cm's default_roce_tos, usually 0).
  # tos = 106

  # address (addr_traddr): the IPv4 or IPv6 address to listen on; for RDMA
  # it is the device's address, and its GID. Required for rdma.
  address = "127.0.0.1"

  # address_family (addr_adrfam): "ipv4" or "ipv6". Default: the family of
  # address.
  address_family = "ipv4"

  # service (addr_trsvcid): the NVMe-oF service ID (the RDMA CM port),
  # 1..65535, as a number or a string. Default 4420.
  service = 4420

  # treq (addr_treq): transport requirements announced in the discovery
  # log page, "not specified", "required" or "not required". Default
  # "not specified".
  treq = "not specified"

  # inline_data_size (param_inline_data_size): bytes of write data a host
  # may send inside the command capsule, 0..16384 (16 KiB, the kernel's
  # RDMA maximum). The host's IOCCSZ is (64 + this) / 16. Default 8192.
  inline_data_size = 8192

  # portid (addr_portid): the PORTID in discovery log entries, 1..65535.
  # Default: the label when it is a number, else the next free number
  # from 1.
  portid = 1

  # connect_timeout: seconds a queue may take from its RDMA CM request to
  # its Fabrics Connect command. Default 10.
  # connect_timeout = 10

  # max_pending, max_pending_per_host: queues that may wait between CM
  # request and Fabrics Connect, in all and per host address (a flood of
  # half-open connections cannot take the target's memory). Defaults 256
  # and 128.
  # max_pending          = 256
  # max_pending_per_host = 128

  # data_pool_size: the cap of the staging buffers the port's queues share
  # for RDMA READ and WRITE data (bytes, or a string with a unit as size
  # below). Default 64 MiB.
  # data_pool_size = "64MiB"

  # srq_size: capsule buffers of the port's shared receive queue; 0 gives
  # each queue its own receive ring instead. Default 1024.
  # srq_size = 1024

  # congestion: RoCEv2 congestion control of the soft provider (ECN
  # marking, CNPs, DCQCN; docs/congestion.md), off by default. It needs
  # provider = "soft" (an RDMA NIC configures its own in firmware), and
  # soft ports on one address share a device, so their blocks must be
  # equal. A change on reload applies to the running device, its
  # existing QPs included. Unknown keys are errors. Zero or
  # absent values take the defaults shown.
  # congestion {
  #   enabled             = true     # the block alone does not turn it on
  #   ecn                 = "ect0"   # or "ect1": the data packets' ECN codepoint
  #   min_cnp_interval    = "50us"   # least time between two CNPs of a QP
  #   cnp_dscp            = 48       # DSCP of CNPs, 1..63; -1: the QP's class
  #   line_rate           = "10Gbit" # bits/s (a number, or kbit/Mbit/Gbit/Tbit): set it to the link's
  #   min_rate            = "10Mbit" # floor of the rate cuts
  #   additive_increase   = "40Mbit" # DCQCN R_AI
  #   hyper_increase      = "400Mbit" # DCQCN R_HAI
  #   g                   = 0.00390625 # DCQCN alpha gain (1/256)
  #   alpha_period        = "55us"   # DCQCN K
  #   increase_period     = "55us"   # DCQCN T
  #   rate_reduce_period  = "4us"    # least time between two cuts
  #   byte_counter        = "10MiB"  # DCQCN B
  #   fast_recovery_steps = 5        # DCQCN F
  # }

  # subsystems: the subsystems exported on this port. The same links can be
  # written from the subsystem side (its ports attribute); both are merged.
  # Default: none.
  # subsystems = ["nqn.2026-11.io.nvmeof:disk0"]

  # ana_group (ports/<id>/ana_groups/<grpid>): this port's state of an
  # Asymmetric Namespace Access group, which tells hosts with native NVMe
  # multipath which paths to a namespace to use. The label is the group
  # ID, 1..128; one block per group.
  # state (ana_state): "optimized", "non-optimized", "inaccessible",
  # "persistent-loss" or "change". Default "optimized".
  # Group 1 is on every port, optimized unless a block says otherwise;
  # another group that a namespace is in (its ana_grpid) but this port
  # does not list is inaccessible here (nvmetd warns). A reload that
  # changes states tells the hosts (an ANA change event) without
  # restarting the port. Default: group 1 optimized only.
  # ana_group "1" { state = "optimized" }
  # ana_group "2" { state = "non-optimized" }
}

# A second port on IPv6 loopback, exporting the same subsystem.
port "rdma6" {
  transport = "rdma"
  address   = "::1"
  service   = "4421"
}

# A host (configfs hosts/). The label is the host NQN (nvme-cli's
# /etc/nvme/hostnqn). Optional: a host named in a subsystem's allowed_hosts
# is created without a block; declare one here to keep a host that no
# subsystem lists yet (it is kept in hosts/, as with nvmetcli).
#
# DH-HMAC-CHAP (in-band authentication, as the kernel's hosts/<nqn>/dhchap_*;
# see auth.hcl in this directory): with dhchap_key set, every queue of this
# host authenticates first.
#   dhchap_key           = "DHHC-1:01:...:"  # nvme gen-dhchap-key output
#   dhchap_key_file      = "host.key"        # instead: read at load, must be mode 0600
#   dhchap_ctrl_key      = "DHHC-1:00:...:"  # bidirectional: the target proves its key too
#   dhchap_ctrl_key_file = "ctrl.key"
#   dhchap_hash          = "hmac(sha256)"    # default; hmac(sha384), hmac(sha512)
#   dhchap_dhgroup       = "null"            # default; ffdhe2048 ffdhe3072 ffdhe4096 ffdhe6144 ffdhe8192
host "nqn.2014-08.org.nvmexpress:uuid:5a3c6b1e-8f2d-4c7a-9e01-3b5d7f9a1c2e" {}

# A subsystem. The label is its NQN: nqn.yyyy-mm.reverse.domain:name, or
# nqn.2014-08.org.nvmexpress:uuid:<uuid>; at most 223 bytes. Other names
# the Linux target accepts (like nvmetcli's "testnqn": printable, without
# spaces or '/') load with a warning, as hosts that check NQNs may refuse
# them; a name in the uuid form must hold a valid UUID.
subsystem "nqn.2026-11.io.nvmeof:disk0" {
  # ports: the ports (by label) this subsystem is exported on. Default:
  # none.
  ports = ["rdma0", "rdma6"]

  # allow_any_host (attr_allow_any_host): let every host connect. Cannot
  # be true while allowed_hosts lists hosts. Default false.
  allow_any_host = false

  # allowed_hosts (the subsystem's allowed_hosts/ links): host NQNs allowed
  # to connect. A host without a host block gets one implicitly. Default:
  # none.
  allowed_hosts = ["nqn.2014-08.org.nvmexpress:uuid:5a3c6b1e-8f2d-4c7a-9e01-3b5d7f9a1c2e"]

  # serial (attr_serial): Identify Controller serial number, at most 20
  # printable ASCII characters. Default: chosen by the target.
  serial = "NVMEOF0001"

  # model (attr_model): Identify Controller model number, at most 40
  # printable ASCII characters. Default: the target's name.
  model = "nvmeof"

  # firmware (attr_firmware): firmware revision, at most 8 printable ASCII
  # characters. Default: the target's version.
  firmware = "0.1"

  # version (attr_version): the NVMe version reported (VS), "major.minor"
  # or "major.minor.tertiary". Default "1.3".
  version = "1.3"

  # cntlid_min, cntlid_max (attr_cntlid_min, attr_cntlid_max): the range
  # controller IDs are taken from, 1..65519 (0xffef), min <= max. Defaults
  # 1 and 65519.
  cntlid_min = 1
  cntlid_max = 65519

  # qid_max (attr_qid_max): I/O queues a controller may create,
  # 1..65534. Default 128.
  # qid_max = 128

  # max_controllers: controllers of this subsystem at once (nvmetd only).
  # Default: 1024.
  # max_controllers = 16

  # max_controllers_per_host: of them, the controllers one host NQN may
  # have at once (nvmetd only; Connect Controller Busy past it). Default 16.
  # max_controllers_per_host = 4

  # A namespace. The label is its NSID, 1..4294967294.
  namespace "1" {
    # backend: "file" (a regular file), "block" (a block device node),
    # "memory" (a sparse RAM disk) or "null" (reads zeroes, drops writes).
    # Default: "block" when path is under /dev/, else "file".
    backend = "file"

    # path (device_path): the file or device node. Required for file and
    # block; not allowed for memory and null. A relative path is relative
    # to this file's directory. A missing file is created (sparse), and
    # its missing directories too (mode 0700).
    path = "/var/lib/nvmetd/disk0.img"

    # size: bytes, as a number or a string with a unit: KiB, MiB, GiB, TiB
    # (or K, M, G, T) are powers of 1024, KB, MB, GB, TB powers of 1000.
    # Required for memory and null and to create a file; for an existing
    # file it must match the file's size (see grow); for a block device it
    # may be smaller than the device. Default: the file's or device's size.
    size = "1GiB"

    # block_size: the logical block size, a power of two from 512 to 65536.
    # Default 512 (a block device: its logical block size).
    block_size = 512

    # grow: extend an existing file smaller than size (files are never
    # shrunk). Default false: a size mismatch is an error.
    grow = false

    # uuid, nguid, eui64 (device_uuid, device_nguid; eui64 is nvmetd's
    # own): the namespace identifiers hosts see (/dev/disk/by-id).
    # Default: derived from the subsystem NQN and the NSID, so they stay
    # the same across restarts.
    uuid  = "2a7e4e3c-61f1-4f0d-8b1e-8d9f0c6a1b27"
    nguid = "6e1b0d2c-4f5a-4b3c-9d8e-7f6a5b4c3d2e"
    eui64 = "0225b3c4d5e6f708"

    # enabled (enable): expose the namespace. As with Linux nvmet, a
    # namespace configured disabled does not open its backend (which need
    # not exist yet); enabling it on a reload opens it, and the reload is
    # refused if it cannot. Disabling keeps an opened backend open.
    # Default true.
    enabled = true

    # buffered_io (buffered_io): go through the page cache instead of
    # O_DIRECT (file and block backends). Default false: O_DIRECT, and a
    # file system that refuses it (tmpfs before Linux 6.6) fails the
    # namespace with an error that says to set this. docs/backends.md.
    buffered_io = false

    # queue_depth (nvmetd only): I/Os in flight to a file or block
    # backend at once, 1..4096; the hosts' commands beyond it wait in
    # order. Default 128.
    queue_depth = 128

    # resv_enable (resv_enable): NVMe persistent reservations (Register,
    # Acquire, Release, Report) for cluster software that fences with
    # them. Kept in memory by this nvmetd only: two gateways exporting the
    # namespace do not share them, and a restart drops them
    # (docs/reservations.md). Default false, as in Linux.
    resv_enable = false

    # resv_ptpl_file (nvmetd only, as SPDK's ptpl_file): with resv_enable,
    # the file where registrations and the reservation persist through a
    # restart when a host asks (Persist Through Power Loss: CPTPL, or Set
    # Features Reservation Persistence). Default none: PTPL unsupported.
    # resv_ptpl_file = "/var/lib/nvmetd/ns1.resv"

    # ana_grpid (ana_grpid): the namespace's ANA group, 1..128; each port's
    # ana_group blocks give the group's state there. Default 1.
    # ana_grpid = 1
  }

  # A 4 GiB RAM-backed namespace: costs memory only for what is written,
  # but may not be larger than the machine's memory (all memory namespaces
  # together): use backend "null" or a sparse file for more.
  namespace "2" {
    backend    = "memory"
    size       = "4GiB"
    block_size = 4096
  }

  # A whole disk, kept disabled: hosts do not see it, and nvmetd does not
  # open the device until a reload sets enabled = true (hosts get a
  # namespace-attribute-changed event then, and may read its SMART data).
  # Set path to one of your disks first; see block.hcl.
  namespace "3" {
    backend = "block"
    path    = "/dev/disk/by-id/nvme-EXAMPLE_SERIAL"
    enabled = false
  }

  # A Ceph RBD image (nvmetd built with -tags rbd; README "Ceph RBD"): its
  # size is the image's, and an rbd resize raises the namespace-changed event.
  # namespace "4" {
  #   backend   = "rbd"
  #   pool      = "rbd"
  #   image     = "vol1"
  #   ceph_conf = "/etc/ceph/ceph.conf"                   # default: librados' search
  #   client_id = "nvmeof"                                # default "admin"
  #   keyring   = "/etc/ceph/ceph.client.nvmeof.keyring"  # default: the conf's
  # }
}

# A subsystem any host may use, on the first port only.
subsystem "nqn.2026-11.io.nvmeof:scratch" {
  ports          = ["rdma0"]
  allow_any_host = true

  namespace "1" {
    backend = "null"
    size    = "1TiB"
  }
}
