//go:build linux

package soft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/internal/bpfsys"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// Shared devices (Config.Share).
//
// rdma_rxe is one device per netdev that every QP of the machine uses.
// Soft devices live in processes (a connection daemon, a fio process), so
// several of them must be able to hold one address and UDP port 4791 at
// once, each receiving exactly the packets of its own QPs:
//
//   - Slots. A shared device takes a slot, 1 to maxShareSlot, by holding
//     an open-file-description lock on byte slot of the address's lock
//     file (ShareDir/ADDR-PORT.lock). The kernel lets go of it when the
//     process dies, so a crashed process frees its slot with no cleanup.
//     Byte 0 of the file serializes joining and leaving.
//   - Numbers. The slot is the top byte of every number a peer sends back
//     to the device: its QP numbers (slot << 16 | 16 bits, so 65 519 QPs
//     a device) and the connection manager's local communication IDs
//     (slot << 24 | 24 bits), which a peer's REP, REJ, MRA, DREQ and DREP
//     carry as their remote communication ID.
//   - Steering. Every device binds addr:port with SO_REUSEPORT. When the
//     device receives through its UDP sockets (GSO mode on 127.0.0.0/8,
//     IPv6), an eBPF SK_REUSEPORT program picks the socket from a
//     REUSEPORT_SOCKARRAY map keyed by slot × 4 + (QPN & 3), receive
//     queue QPN & 3 of the slot's device (which makes only QPs whose low
//     bits name one of its queues); for QP 1 (CM MADs) key slot × 4 of
//     the remote communication ID's slot. The map is
//     shared through its ID, kept in ShareDir/ADDR-PORT.map; every joiner
//     loads the program and attaches it to the group (the same program
//     over the same map: replacing it is harmless). A datagram whose key
//     has no socket (a REQ, a dead device's QP) falls back to the
//     kernel's hash and is dropped or answered by whichever device gets
//     it, as packets for an unknown QP are. In raw mode (IPv4 off
//     loopback) each device's raw sockets filter on their slot, and the
//     UDP sockets only keep the port bound.
//
// A shared device cannot listen (a REQ carries no slot); it needs the
// privilege to load an eBPF program (CAP_BPF and CAP_NET_ADMIN, or root)
// except in raw mode, which needs CAP_NET_RAW anyway. A device opened
// without Share still binds the port alone: it fails with EADDRINUSE
// where shared devices hold the address, and they fail where it does, as
// they do where rdma_rxe holds port 4791.

// DefaultShareDir is where shared devices keep their lock and map files
// (Config.ShareDir).
const DefaultShareDir = "/run/soft-roce"

// maxShareSlot is the largest slot: the top byte of a QP number.
const maxShareSlot = 255

// shareKeys is the number of map keys per slot (QPN & 3).
const shareKeys = 4

// shareQPNBits are the low bits of a shared device's QP numbers.
const shareQPNBits = 16

// shareMapName names the steering map (checked when it is found again).
const shareMapName = "soft_roce_rp"

// ErrShareUnsupported reports that a shared device cannot be opened here:
// no privilege to load the steering program, or a kernel without it.
var ErrShareUnsupported = errors.New("soft: shared device not supported here")

// shareGroup is a device's place among the shared devices of its address
// and port.
type shareGroup struct {
	lock *os.File
	slot uint8
	// others: another device held a slot when this one joined.
	others  bool
	mapPath string
}

// joinShare takes a slot among the shared devices of addr:port. It
// returns with the join lock held: the caller opens its sockets and then
// calls joined (or leave on failure).
func joinShare(dir string, addr netip.Addr, port uint16) (*shareGroup, error) {
	if dir == "" {
		dir = DefaultShareDir
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("soft: shared device directory: %w", err)
	}
	base := filepath.Join(dir, strings.ReplaceAll(addr.String(), ":", "_")+"-"+strconv.Itoa(int(port)))
	f, err := os.OpenFile(base+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("soft: shared device lock: %w", err)
	}
	g := &shareGroup{lock: f, mapPath: base + ".map"}
	if err := g.lockByte(0, true); err != nil {
		f.Close()
		return nil, fmt.Errorf("soft: shared device lock: %w", err)
	}
	for s := 1; s <= maxShareSlot; s++ {
		if g.lockByte(int64(s), false) == nil {
			g.slot = uint8(s)
			break
		}
	}
	if g.slot == 0 {
		g.unlockByte(0)
		f.Close()
		return nil, fmt.Errorf("soft: %d shared devices on %s already: %w", maxShareSlot, addr, syscall.EADDRINUSE)
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Start: 1, Len: maxShareSlot}
	if unix.FcntlFlock(f.Fd(), unix.F_OFD_GETLK, &lk) == nil && lk.Type != unix.F_UNLCK {
		g.others = true
	}
	return g, nil
}

// lockByte takes the write lock on byte off of the lock file, waiting
// for it if wait.
func (g *shareGroup) lockByte(off int64, wait bool) error {
	cmd := unix.F_OFD_SETLK
	if wait {
		cmd = unix.F_OFD_SETLKW
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Start: off, Len: 1}
	for {
		err := unix.FcntlFlock(g.lock.Fd(), cmd, &lk)
		if err != unix.EINTR {
			return err
		}
	}
}

func (g *shareGroup) unlockByte(off int64) {
	lk := unix.Flock_t{Type: unix.F_UNLCK, Start: off, Len: 1}
	_ = unix.FcntlFlock(g.lock.Fd(), unix.F_OFD_SETLK, &lk)
}

// joined lets other devices join or leave.
func (g *shareGroup) joined() { g.unlockByte(0) }

// beginLeave waits until no device joins or leaves; the caller closes
// its sockets and then calls leave.
func (g *shareGroup) beginLeave() { _ = g.lockByte(0, true) }

// leave gives the slot up (the join lock held: beginLeave, or a failed
// join) and closes the lock file, which releases every lock.
func (g *shareGroup) leave() { g.lock.Close() }

// qpnBase returns the first QP number of the slot.
func (g *shareGroup) qpnBase() uint32 { return uint32(g.slot) << shareQPNBits }

// shareQueue returns the receive queue that reads QP qpn's packets on a
// shared device: its two low bits (a device of n queues only makes QPs
// whose low bits are below n, since the kernel lets a socket sit under
// one map key only), and queue 0 for QP 1.
func shareQueue(qpn uint32) int {
	if qpn == 1 {
		return 0
	}
	return int(qpn & (shareKeys - 1))
}

// shareQPNOK reports whether a device of n receive queues may use QP
// number qpn.
func shareQPNOK(qpn uint32, n int) bool { return shareQueue(qpn) < n }

// Offsets, from the UDP header, of what the steering reads.
const (
	shareQPNOff    = wire.UDPHeaderLen + 4                                   // BTH word 1: destination QP
	shareCommIDOff = wire.UDPHeaderLen + wire.BTHLen + wire.DETHLen + 24 + 4 // a CM MAD's remote communication ID
)

// steerShared attaches the steering program to the reuseport group of
// recv and puts recv in the map under the slot's keys.
func (g *shareGroup) steerShared(recv []*sockConn) error {
	mapFD, err := g.steeringMap()
	if err != nil {
		return err
	}
	defer unix.Close(mapFD)
	progFD, err := bpfsys.LoadProg(unix.BPF_PROG_TYPE_SK_REUSEPORT, unix.BPF_SK_REUSEPORT_SELECT, steeringProg(mapFD), "Dual MIT/GPL", "soft_roce_steer")
	if err != nil {
		return shareErr(err)
	}
	defer unix.Close(progFD)
	var serr error
	err = recv[0].Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_EBPF, progFD)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return shareErr(fmt.Errorf("attaching the steering program: %w", err))
	}
	for k, rc := range recv {
		var key [4]byte
		var val [8]byte
		binary.NativeEndian.PutUint32(key[:], uint32(g.slot)*shareKeys+uint32(k))
		err = rc.Control(func(fd uintptr) {
			binary.NativeEndian.PutUint64(val[:], uint64(fd))
			serr = bpfsys.UpdateElem(mapFD, key[:], val[:], 0)
		})
		if err == nil {
			err = serr
		}
		if err != nil {
			return fmt.Errorf("soft: steering map: %w", err)
		}
	}
	return nil
}

// steeringMap returns a descriptor of the group's map: the one named in
// the map file if it still exists, else a new one, recorded there.
func (g *shareGroup) steeringMap() (int, error) {
	if b, err := os.ReadFile(g.mapPath); err == nil {
		if id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32); err == nil {
			if fd, err := bpfsys.MapFDByID(uint32(id)); err == nil {
				info, err := bpfsys.MapInfoByFD(fd)
				if err == nil && info.Type == unix.BPF_MAP_TYPE_REUSEPORT_SOCKARRAY && info.KeySize == 4 &&
					info.ValueSize == 8 && info.MaxEntries == (maxShareSlot+1)*shareKeys && info.NameString() == shareMapName {
					return fd, nil
				}
				unix.Close(fd)
			}
		}
	}
	fd, err := bpfsys.CreateMap(unix.BPF_MAP_TYPE_REUSEPORT_SOCKARRAY, 4, 8, (maxShareSlot+1)*shareKeys, shareMapName)
	if err != nil {
		return -1, shareErr(err)
	}
	info, err := bpfsys.MapInfoByFD(fd)
	if err == nil {
		err = os.WriteFile(g.mapPath, []byte(strconv.FormatUint(uint64(info.ID), 10)+"\n"), 0o600)
	}
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("soft: steering map: %w", err)
	}
	return fd, nil
}

// shareErr marks a failure to set up steering as ErrShareUnsupported when
// it comes from missing privilege or kernel support.
func shareErr(err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.EINVAL) ||
		errors.Is(err, unix.ENOSYS) || errors.Is(err, errors.ErrUnsupported) {
		return fmt.Errorf("%w: %w", ErrShareUnsupported, err)
	}
	return fmt.Errorf("soft: steering: %w", err)
}

// steeringProg is the SK_REUSEPORT program: key = slot × 4 + (QPN & 3)
// from the first packet's BTH, or for QP 1 the slot of the MAD's remote
// communication ID; select the socket at key in map mapFD. A datagram it
// cannot read or whose key has no socket falls back to the kernel's hash.
func steeringProg(mapFD int) []bpfsys.Insn {
	const (
		ctx = bpfsys.R6
		key = bpfsys.R7
		tmp = bpfsys.R8
	)
	load := func(off int32) []bpfsys.Insn { // R0 = 0 and fp[-8] = 4 bytes at off
		return []bpfsys.Insn{
			bpfsys.Mov64Reg(bpfsys.R1, ctx),
			bpfsys.Mov64Imm(bpfsys.R2, off),
			bpfsys.Mov64Reg(bpfsys.R3, bpfsys.R10),
			bpfsys.Add64Imm(bpfsys.R3, -8),
			bpfsys.Mov64Imm(bpfsys.R4, 4),
			bpfsys.Call(bpfsys.FuncSkbLoadBytes),
		}
	}
	var p []bpfsys.Insn
	p = append(p, bpfsys.Mov64Reg(ctx, bpfsys.R1))
	p = append(p, load(shareQPNOff)...)
	p = append(p, bpfsys.JneImm(bpfsys.R0, 0, 0)) // → pass (patched below)
	jFail1 := len(p) - 1
	p = append(p,
		bpfsys.LdxW(key, bpfsys.R10, -8),
		bpfsys.BE32(key),
		bpfsys.And64Imm(key, wire.QPNMask),
		bpfsys.JeqImm(key, 1, 0), // → cm (patched below)
	)
	jCM := len(p) - 1
	// A data QP: slot = QPN >> 16.
	p = append(p,
		bpfsys.Mov64Reg(tmp, key),
		bpfsys.And64Imm(tmp, shareKeys-1),
		bpfsys.Rsh64Imm(key, shareQPNBits),
		bpfsys.And64Imm(key, 0xff),
		bpfsys.Lsh64Imm(key, 2),
		bpfsys.Add64Reg(key, tmp),
		bpfsys.Ja(0), // → select (patched below)
	)
	jSel := len(p) - 1
	cm := len(p)
	p = append(p, load(shareCommIDOff)...)
	p = append(p, bpfsys.JneImm(bpfsys.R0, 0, 0))
	jFail2 := len(p) - 1
	p = append(p,
		bpfsys.LdxW(key, bpfsys.R10, -8),
		bpfsys.BE32(key),
		bpfsys.Rsh64Imm(key, 24),
		bpfsys.Lsh64Imm(key, 2), // QP 1 is read by queue 0
	)
	sel := len(p)
	ld := bpfsys.LdMapFD(bpfsys.R2, mapFD)
	p = append(p,
		bpfsys.StxW(bpfsys.R10, key, -4),
		bpfsys.Mov64Reg(bpfsys.R1, ctx),
		ld[0], ld[1],
		bpfsys.Mov64Reg(bpfsys.R3, bpfsys.R10),
		bpfsys.Add64Imm(bpfsys.R3, -4),
		bpfsys.Mov64Imm(bpfsys.R4, 0),
		bpfsys.Call(bpfsys.FuncSkSelectReuseport),
	)
	pass := len(p)
	p = append(p, bpfsys.Mov64Imm(bpfsys.R0, 1), bpfsys.Exit()) // SK_PASS
	p[jFail1].Off = int16(pass - jFail1 - 1)
	p[jFail2].Off = int16(pass - jFail2 - 1)
	p[jCM].Off = int16(cm - jCM - 1)
	p[jSel].Off = int16(sel - jSel - 1)
	return p
}
