// Package initiator is the NVMe-oF host: discovery, connect (admin and I/O queues), and namespaces as io.ReaderAt and io.WriterAt with flush and trim.
//
// It follows the Linux host (drivers/nvme/host/fabrics.c, core.c, rdma.c)
// and nvme-cli's defaults over any fabrics.Dialer:
//
//   - Connect opens the admin queue (32 entries: Connect SQSIZE 31), sends
//     the Fabrics Connect with its 1024-byte data (host ID, controller ID
//     0xFFFF, subsystem and host NQNs) and the keep-alive timeout, reads
//     CAP and VS, enables the controller (CC.EN, IOSQES 6, IOCQES 4, CSS
//     NVM) and waits for CSTS.RDY within CAP.TO, reads Identify Controller
//     (MDTS, IOCCSZ for the in-capsule data size, SGLS, MAXCMD, KAS),
//     asks for NrIOQueues with Set Features Number of Queues, connects the
//     I/O queues (QueueSize entries, capped by CAP.MQES and MAXCMD),
//     configures asynchronous events and reads the active namespaces.
//   - Keep Alive goes every KATO/2 (KATO/4 with Traffic Based Keep Alive,
//     skipped when other commands completed meanwhile). Its failure, a
//     queue's transport failure or an admin command timeout starts
//     recovery: the queues are torn down, outstanding I/O waits, and the
//     host reconnects every ReconnectDelay until CtrlLossTimeout, then
//     fails I/O with ErrControllerLost. A Connect refused with DNR ends
//     recovery at once.
//   - Every command, synchronous or asynchronous, runs on one engine
//     (docs/host-engine.md): a slot of its queue whose index is the
//     command's tag (the CID's low bits) in the transport too. A command
//     that times out gets an Abort on the admin queue and a further
//     timeout; then its queue alone is closed and reconnected (the admin
//     queue: the association). The caller gets a *TimeoutError
//     (errors.Is ErrTimeout). Connect, Keep Alive, Abort and the commands
//     run while connecting get no Abort. The Linux fabrics hosts send no
//     Abort: they recover the whole controller.
//   - Status errors come back as *CommandError (or *ConnectError) wrapping
//     an *nvme.Error: errors.As(err, new(*nvme.Error)) gives the status.
//   - Namespace.ReadAt and WriteAt split transfers at MDTS, the transport's
//     limit and 65536 blocks, spread the pieces over the I/O queues round
//     robin and keep up to 64 in flight. A 4 KiB ReadAt allocates nothing.
//   - Namespace.Start is the asynchronous form (IO, its Done callback): a
//     Read, Write, Write Zeroes or Flush that is one command is submitted
//     on the caller's goroutine and completes from the transport's
//     completion callback, timed out as any command. Everything else runs
//     the synchronous method on a goroutine. A 4 KiB Start allocates
//     nothing.
//   - Namespace Attribute Changed events re-read the Changed Namespace List
//     and the namespaces before Options.OnAsyncEvent is called. A reset or
//     reconnect rescans the namespaces; what changed while no association
//     could hear the controller's notice is reported as such an event with
//     AsyncEvent.Rescan set.
//   - Disconnect closes the I/O queues, sets CC.SHN to normal shutdown and
//     waits for CSTS.SHST, then closes the admin queue.
//
// A minimal use:
//
//	c, err := initiator.Connect(ctx, dialer, addr, initiator.Options{SubsystemNQN: nqn})
//	if err != nil { ... }
//	defer c.Close()
//	ns, err := c.Namespace(1)
//	n, err := ns.ReadAt(buf, 0) // offsets and lengths in whole blocks
//
// No call returns, and no IO's Done runs, while the transport may still
// write the caller's buffer: a command that timed out finishes once its
// queue is closed, and an admin command whose context ends early has
// moved its data through the slot's own buffer.
package initiator
