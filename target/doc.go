// Package target is the transport-neutral NVMe over Fabrics target:
// subsystems, namespaces, controllers, ports and hosts; admin and I/O
// command execution; the discovery controller; keep-alive and asynchronous
// events.
//
// A Target holds NVM subsystems (AddSubsystem), their namespaces
// (AddNamespace, each a target/bdev Device), the hosts allowed to use them,
// and ports (AddPort) that export subsystems. A transport listener for a
// port is handed to Serve, which serves every queue hosts open on it.
// Everything may change while ports are served, one call at a time; the
// package knows nothing of the configuration format: target/reconcile
// applies a configfs tree (and a reload) through these calls.
//
// The behaviour follows the Linux kernel target (drivers/nvme/target) of
// Linux 6.1 and what the Linux host expects:
//
//   - Dynamic controllers: an admin Connect with controller ID FFFFh creates
//     a controller with an ID from the subsystem's range; I/O Connects name
//     it. Connect failures report Connect Invalid Parameters with IATTR/IPO
//     naming the field, Connect Invalid Host, or Command Sequence Error (I/O
//     queue already connected, controller not enabled).
//   - Properties CAP (MQES from the port, CQR, TO 7.5 s, CSS NVM and I/O
//     command sets), VS (1.3 unless configured), CC and CSTS; enabling
//     checks IOSQES/IOCQES, MPS, AMS and CSS and sets CSTS.RDY or CFS;
//     disabling or shutting down also closes the I/O queues.
//   - Keep-alive: KATO rounded up to seconds (120 s for discovery
//     controllers that ask for none); any command or completion counts as traffic (TBKAS);
//     expiry tears the controller down, as does losing its admin queue.
//   - Admin commands: Identify (CNS 00h-03h, 05h-08h), Get Log Page
//     (Supported Logs, Error, SMART / Health, Firmware Slot, Changed
//     Namespace List, Commands Supported and Effects; the discovery log on
//     discovery controllers, with the current discovery subsystem entry),
//     Set/Get Features (Arbitration, Power Management, Temperature
//     Threshold, Volatile Write Cache, Number of Queues, Asynchronous Event
//     Configuration, Keep Alive Timer, Host Identifier), Asynchronous Event
//     Request (4 outstanding; namespace and discovery log changes, and
//     SMART / Health critical warnings of block backends, polled while a
//     host enabled them: healthaen.go), Keep Alive and Abort (which aborts
//     nothing, as Linux).
//   - I/O commands: Read, Write (FUA), Flush (NSID FFFFFFFFh flushes every
//     namespace), Write Zeroes, Dataset Management (deallocate) and Compare.
//     The transport's goroutine only validates a command; a fixed pool of
//     goroutines per namespace runs the backend, and the path allocates
//     nothing per command.
//   - Completions carry SQHD (advanced per completion modulo the queue
//     size, or left out when the host disabled SQ flow control), and every
//     error is recorded in the Error Information log (the More bit is set).
//
// Where this package departs from Linux it follows the specification or
// the task: a command before Connect fails with Command Sequence Error
// (Linux: Invalid Command Opcode); Identify Namespace of NSID 0 or above
// NN fails with Invalid Namespace or Format (Linux: zeroes); Get Log Page
// honours LPO for every log page, not only the discovery log; the SMART /
// Health log of NSID 0 is the controller's; Flush of NSID FFFFFFFFh is
// supported; the serial number of a subsystem that sets none is derived
// from its NQN rather than random; Disconnect is implemented; Compare is
// supported. Persistent reservations (NamespaceConfig.Reservations,
// reservation.go) are kept in memory per namespace, and in a file for
// Persist Through Power Loss when one is configured (docs/reservations.md). Fused commands, ANA, PI and
// authentication are not.
package target
