// Package configfs is the target configuration tree in the shape of the
// Linux kernel's nvmet configfs (drivers/nvme/target/configfs.c):
// subsystems with their attr_* attributes, namespaces and allowed hosts;
// ports with their addr_* and param_* attributes and the subsystems they
// export; hosts. Field names follow the configfs attribute names, and
// validation follows the kernel's store handlers where it has rules
// (serial ≤ 20 printable ASCII bytes, model ≤ 40, firmware ≤ 8, cntlid
// range, nsid neither 0 nor 0xffffffff, allow_any_host exclusive with
// allowed_hosts), plus rules of our own (NQN syntax, as warnings: see
// NQNs below; backends, sizes, addresses, references).
//
// A Tree is loaded from nvmetd's HCL file (ParseHCL, LoadFile) or from the
// JSON nvmetcli saves (ParseNvmetcliJSON), validated as a whole
// (Tree.Validate returns every error, each with the file, line and column
// and the attribute name when the tree came from a file), saved back
// (Tree.HCL, Tree.NvmetcliJSON), copied (Tree.Clone) and compared for a
// reload (Diff).
//
// # HCL
//
//	log_level = "info"               # trace, debug, info, warn, error, off
//
//	port "rdma0" {                   # label: the port's name (any [A-Za-z0-9_.-])
//	  transport        = "rdma"      # addr_trtype: rdma, tcp or loop
//	  provider         = "auto"      # soft (pure Go RoCEv2), ibverbs (rdma-core) or auto
//	  device           = "mlx5_0"    # optional: the rdma-core device (ibverbs)
//	  tos              = 106         # optional: IP type of service, 0..255 (rdma, tcp)
//	  address          = "192.0.2.1" # addr_traddr: an IPv4 or IPv6 address
//	  address_family   = "ipv4"      # addr_adrfam: derived from address when left out
//	  service          = 4420        # addr_trsvcid: 1..65535, default 4420
//	  treq             = "not specified" # addr_treq: or "required", "not required"
//	  inline_data_size = 8192        # param_inline_data_size: 0..16384, default 8192
//	  connect_timeout  = 10          # seconds from CM REQ (tcp: accept) to Fabrics Connect (nvmetd only)
//	  max_pending      = 256         # queues between CM REQ (tcp: accept) and Connect (nvmetd only)
//	  max_pending_per_host = 128     # the same per host address (nvmetd only)
//	  data_pool_size   = "64MiB"     # cap of the queues' shared data buffers (nvmetd only)
//	  srq_size         = 1024        # capsule buffers of the shared receive queue, 0: none (nvmetd only)
//	  portid           = 1           # addr_portid: the discovery log's PORTID
//	  subsystems       = ["nqn…"]    # optional: the same links as a subsystem's ports
//	  ana_group "2" {                # ana_groups/<grpid>: label 1..128, repeatable
//	    state = "non-optimized"      # ana_state: optimized (default), non-optimized,
//	  }                              #   inaccessible, persistent-loss, change
//	}
//
//	host "nqn.2014-08.org.nvmexpress:uuid:…" { # optional, see below
//	  dhchap_key      = "DHHC-1:01:…:" # or dhchap_key_file (mode 0600): DH-HMAC-CHAP
//	  dhchap_ctrl_key = "DHHC-1:00:…:" # or dhchap_ctrl_key_file: bidirectional
//	  dhchap_hash     = "hmac(sha256)" # hmac(sha384), hmac(sha512)
//	  dhchap_dhgroup  = "null"         # ffdhe2048 … ffdhe8192
//	}
//
//	subsystem "nqn.2026-11.io.nvmeof:disk0" {
//	  ports          = ["rdma0"]
//	  allow_any_host = false         # attr_allow_any_host
//	  allowed_hosts  = ["nqn.2014-08.org.nvmexpress:uuid:…"] # hosts/ links
//	  serial         = "NVMEOF0001"  # attr_serial
//	  model          = "nvmeof"      # attr_model
//	  firmware       = "1.0"         # attr_firmware
//	  version        = "1.3"         # attr_version
//	  cntlid_min     = 1             # attr_cntlid_min
//	  cntlid_max     = 65519         # attr_cntlid_max
//	  qid_max        = 128           # attr_qid_max: I/O queues per controller, 1..65534
//	  max_controllers = 16           # optional: controllers at once (nvmetd only)
//	  max_controllers_per_host = 4   # optional: of them, one host NQN's (nvmetd only)
//
//	  namespace "1" {                # label: the NSID, 1..4294967294
//	    backend     = "file"         # file, block, memory, null or rbd
//	    path        = "/var/lib/nvmetd/disk0.img" # device_path
//	    size        = "1GiB"         # bytes, or a string with a unit (see ParseSize)
//	    block_size  = 512            # 512..65536, a power of two
//	    grow        = false          # extend a smaller existing file to size
//	    uuid        = "…"            # device_uuid
//	    nguid       = "…"            # device_nguid
//	    eui64       = "…"            # device_eui64
//	    enabled     = true           # enable
//	    buffered_io = false          # buffered_io: file and block through the page cache, not O_DIRECT
//	    queue_depth = 128            # nvmetd only: I/Os in flight to a file or block backend, 1..4096
//	    resv_enable = false          # resv_enable: persistent reservations
//	    resv_ptpl_file = "…"         # nvmetd only: where they persist through power loss
//	    ana_grpid   = 1              # ana_grpid: the namespace's ANA group, 1..128
//	    # backend "rbd" (nvmetd built with -tags rbd) takes instead of path:
//	    # pool, image (required), ceph_conf, client_id ("admin"), keyring
//	  }
//	}
//
// See examples/nvmetd.hcl for every option with its default.
//
// The kernel's tree needs hosts/<nqn> for each allowed_hosts link; the HCL
// loader creates the host for a name in allowed_hosts that no host block
// declares (Tree.HCL leaves it implied again), so host blocks are needed
// only for hosts no subsystem lists. nvmetcli JSON and trees built in code
// must list their hosts, as configfs does.
//
// # ANA
//
// Each port gives each ANA group a state (Port.ANAGroups, Port.ANAState);
// a namespace is in one group (Namespace.ANAGrpID). Group 1 is on every
// port, optimized unless an ana_group "1" block says otherwise, as Linux
// creates ports/<id>/ana_groups/1. A group a namespace is in but a port
// exporting its subsystem does not list is inaccessible through that port:
// a warning (Tree.Warnings). Tree.HCL leaves out group 1 when it is a
// port's only group and optimized, and ana_grpid 1. Diff reports changed
// states as PortChanges.ANA, which does not restart the listener, and a
// changed ana_grpid as a changed namespace.
//
// # nvmetcli JSON
//
// ParseNvmetcliJSON reads what `nvmetcli save` writes, plus an "nvmeof"
// object per port and namespace for nvmetd's own attributes. A port's
// "ana_groups" ([{"ana": {"state": "optimized"}, "grpid": 1}, …]) and a
// namespace's "ana_grpid" are applied; Tree.NvmetcliJSON writes group 1
// on every port and ana_grpid on every namespace, as nvmetcli save does.
// No key is dropped silently: a key neither applies is an error naming
// its JSON path and line:col, with the closest known key for a typo;
// kernel attributes nvmetd does not implement are errors when their value
// would change what hosts rely on (pi_enable, a datagram tsas) and
// warnings when only what they are told or a tuning is lost (a non-zero
// ieee_oui, max_queue_size); at the kernel's defaults, which nvmetcli
// writes for every object, they pass silently.
//
// # RDMA providers
//
// An rdma port's provider is "soft" (the pure-Go RoCEv2 HCA), "ibverbs"
// (rdma-core, in binaries built with the ibverbs tag) or "auto", the
// default: ibverbs when the binary has it and an RDMA device holds the
// port's address, else soft. device names an rdma-core device ("mlx5_0",
// "rxe0"): an error with soft, and with auto it means ibverbs. tos sets
// the IP type of service of the port's connections. In nvmetcli JSON the
// three go in the port's "nvmeof" object. Changing any of them on a
// reload restarts the port's listener (Diff).
//
// Which providers a binary has is not configfs's business: a Loader with
// CheckProvider (cmd/nvmetd passes rdma/provider.Check) reports a port
// asking for one it lacks as an error with the attribute's position.
//
// # NQNs
//
// Subsystem and host names follow CheckNQN: the Linux target accepts any
// configfs directory name, and nvmetcli configurations use names like
// "testnqn", so a name that is not a conforming NQN (fabrics.ValidateNQN)
// loads with a warning (Tree.Warnings) as long as it is safe: 1 to 223
// bytes of printable UTF-8 without whitespace or '/'. Other names are
// errors, and so is a name in the UUID form
// (nqn.2014-08.org.nvmexpress:uuid:…) without a valid UUID, or the
// discovery NQN as a subsystem.
//
// # Defaults and derived values
//
// A namespace without uuid, nguid or eui64 gets identifiers derived from the
// subsystem NQN and the NSID (Namespace.IDs, DeriveUUID, DeriveNGUID,
// DeriveEUI64): the same configuration always yields the same identifiers,
// so hosts see the same namespace after a restart, and no two namespaces of
// a configuration share one. A namespace without backend gets "block" when
// its path is under /dev/ and "file" otherwise.
package configfs
