package blockdev

// The ublk driver's user API (include/uapi/linux/ublk_cmd.h, Linux 6.0+;
// the ioctl-encoded opcodes are what 6.12 accepts, the legacy bare numbers
// need CONFIG_BLKDEV_UBLK_LEGACY_OPCODES). All structures are little-endian
// on the machines this runs on; the views below spell the byte order out.

import "encoding/binary"

// ioc encodes an ioctl number (_IOC): dir(2) size(14) type(8) nr(8).
func ioc(dir, typ, nr, size uint32) uint32 { return dir<<30 | size<<16 | typ<<8 | nr }

const (
	iocWrite = 1
	iocRead  = 2

	ublkCtrlCmdLen = 32 // sizeof(struct ublksrv_ctrl_cmd)
	ublkIOCmdLen   = 16 // sizeof(struct ublksrv_io_cmd)
)

// Control commands, sent as URING_CMD on /dev/ublk-control.
var (
	ublkCmdGetDevInfo = ioc(iocRead, 'u', 0x02, ublkCtrlCmdLen)          // UBLK_U_CMD_GET_DEV_INFO
	ublkCmdAddDev     = ioc(iocRead|iocWrite, 'u', 0x04, ublkCtrlCmdLen) // UBLK_U_CMD_ADD_DEV
	ublkCmdDelDev     = ioc(iocRead|iocWrite, 'u', 0x05, ublkCtrlCmdLen) // UBLK_U_CMD_DEL_DEV
	ublkCmdStartDev   = ioc(iocRead|iocWrite, 'u', 0x06, ublkCtrlCmdLen) // UBLK_U_CMD_START_DEV
	ublkCmdStopDev    = ioc(iocRead|iocWrite, 'u', 0x07, ublkCtrlCmdLen) // UBLK_U_CMD_STOP_DEV
	ublkCmdSetParams  = ioc(iocRead|iocWrite, 'u', 0x08, ublkCtrlCmdLen) // UBLK_U_CMD_SET_PARAMS
	ublkCmdGetParams  = ioc(iocRead, 'u', 0x09, ublkCtrlCmdLen)          // UBLK_U_CMD_GET_PARAMS
	// UBLK_U_CMD_UPDATE_SIZE (Linux 6.16): data[0] is the new size in
	// 512-byte sectors; older drivers answer EOPNOTSUPP.
	ublkCmdUpdateSize = ioc(iocRead|iocWrite, 'u', 0x15, ublkCtrlCmdLen)
)

// I/O commands, sent as URING_CMD on /dev/ublkcN.
var (
	ublkIOFetchReq       = ioc(iocRead|iocWrite, 'u', 0x20, ublkIOCmdLen) // UBLK_U_IO_FETCH_REQ
	ublkIOCommitAndFetch = ioc(iocRead|iocWrite, 'u', 0x21, ublkIOCmdLen) // UBLK_U_IO_COMMIT_AND_FETCH_REQ
)

// Results of a fetch.
const (
	ublkIOResOK    = 0
	ublkIOResAbort = -19 // UBLK_IO_RES_ABORT = -ENODEV: no refetch
)

// I/O operations (ublksrv_io_desc.op_flags bits 0-7) and flags (bits 8+).
const (
	ublkIOOpRead        = 0
	ublkIOOpWrite       = 1
	ublkIOOpFlush       = 2
	ublkIOOpDiscard     = 3
	ublkIOOpWriteSame   = 4
	ublkIOOpWriteZeroes = 5

	ublkIOFFUA     = 1 << 13
	ublkIOFNoUnmap = 1 << 15
)

// Device states (ublksrv_ctrl_dev_info.state).
const (
	ublkStateDead = 0
	ublkStateLive = 1
)

// Device flags (UBLK_F_*); the kernel answers ADD_DEV with what it took.
const (
	ublkFCmdIoctlEncode = 1 << 6
)

// Parameter types and basic attributes.
const (
	ublkParamTypeBasic   = 1 << 0
	ublkParamTypeDiscard = 1 << 1

	ublkAttrReadOnly      = 1 << 0
	ublkAttrVolatileCache = 1 << 2
)

// Memory layout of the per-queue descriptor array on /dev/ublkcN: queue q
// at q * round_up(UBLK_MAX_QUEUE_DEPTH * 24, PAGE_SIZE), one 24-byte
// ublksrv_io_desc per tag.
const (
	ublkMaxQueueDepth = 4096
	ublkIODescLen     = 24
)

// ublkCtrlCmd is struct ublksrv_ctrl_cmd: dev_id(4) queue_id(2) len(2)
// addr(8) data[0](8) dev_path_len(2) pad(2) reserved(4).
type ublkCtrlCmd []byte

func (c ublkCtrlCmd) set(devID uint32, queueID uint16, addr uint64, length uint16, data uint64) {
	clear(c[:ublkCtrlCmdLen])
	binary.LittleEndian.PutUint32(c[0:], devID)
	binary.LittleEndian.PutUint16(c[4:], queueID)
	binary.LittleEndian.PutUint16(c[6:], length)
	binary.LittleEndian.PutUint64(c[8:], addr)
	binary.LittleEndian.PutUint64(c[16:], data)
}

func (c ublkCtrlCmd) devID() uint32   { return binary.LittleEndian.Uint32(c[0:]) }
func (c ublkCtrlCmd) queueID() uint16 { return binary.LittleEndian.Uint16(c[4:]) }
func (c ublkCtrlCmd) length() uint16  { return binary.LittleEndian.Uint16(c[6:]) }
func (c ublkCtrlCmd) addr() uint64    { return binary.LittleEndian.Uint64(c[8:]) }
func (c ublkCtrlCmd) data() uint64    { return binary.LittleEndian.Uint64(c[16:]) }

// ublkDevInfoLen is sizeof(struct ublksrv_ctrl_dev_info).
const ublkDevInfoLen = 64

// ublkDevInfo is struct ublksrv_ctrl_dev_info: nr_hw_queues(2)
// queue_depth(2) state(2) pad0(2) max_io_buf_bytes(4) dev_id(4)
// ublksrv_pid(4) pad1(4) flags(8) ublksrv_flags(8) owner_uid(4)
// owner_gid(4) reserved1(8) reserved2(8).
type ublkDevInfo []byte

func (d ublkDevInfo) nrHWQueues() uint16     { return binary.LittleEndian.Uint16(d[0:]) }
func (d ublkDevInfo) queueDepth() uint16     { return binary.LittleEndian.Uint16(d[2:]) }
func (d ublkDevInfo) state() uint16          { return binary.LittleEndian.Uint16(d[4:]) }
func (d ublkDevInfo) maxIOBufBytes() uint32  { return binary.LittleEndian.Uint32(d[8:]) }
func (d ublkDevInfo) devID() uint32          { return binary.LittleEndian.Uint32(d[12:]) }
func (d ublkDevInfo) srvPID() int32          { return int32(binary.LittleEndian.Uint32(d[16:])) }
func (d ublkDevInfo) flags() uint64          { return binary.LittleEndian.Uint64(d[24:]) }
func (d ublkDevInfo) srvFlags() uint64       { return binary.LittleEndian.Uint64(d[32:]) }
func (d ublkDevInfo) setNRHWQueues(n uint16) { binary.LittleEndian.PutUint16(d[0:], n) }
func (d ublkDevInfo) setQueueDepth(n uint16) { binary.LittleEndian.PutUint16(d[2:], n) }
func (d ublkDevInfo) setMaxIOBufBytes(n uint32) {
	binary.LittleEndian.PutUint32(d[8:], n)
}
func (d ublkDevInfo) setDevID(id uint32)   { binary.LittleEndian.PutUint32(d[12:], id) }
func (d ublkDevInfo) setFlags(f uint64)    { binary.LittleEndian.PutUint64(d[24:], f) }
func (d ublkDevInfo) setSrvFlags(f uint64) { binary.LittleEndian.PutUint64(d[32:], f) }

// ublkParamsLen covers struct ublk_params up to and including the discard
// parameters: len(4) types(4), ublk_param_basic at 8 (32 bytes),
// ublk_param_discard at 40 (20 bytes). SET_PARAMS takes a shorter len than
// the kernel's structure.
const ublkParamsLen = 60

// ublkParams is the head of struct ublk_params.
// basic: attrs(4) logical_bs_shift(1) physical_bs_shift(1) io_opt_shift(1)
// io_min_shift(1) max_sectors(4) chunk_sectors(4) dev_sectors(8)
// virt_boundary_mask(8). discard: discard_alignment(4)
// discard_granularity(4) max_discard_sectors(4) max_write_zeroes_sectors(4)
// max_discard_segments(2) reserved0(2).
type ublkParams []byte

const (
	upLen            = 0
	upTypes          = 4
	upAttrs          = 8
	upLBSShift       = 12
	upPBSShift       = 13
	upIOOptShift     = 14
	upIOMinShift     = 15
	upMaxSectors     = 16
	upChunkSectors   = 20
	upDevSectors     = 24
	upVirtBoundary   = 32
	upDiscardAlign   = 40
	upDiscardGran    = 44
	upMaxDiscard     = 48
	upMaxWriteZeroes = 52
	upMaxDiscardSegs = 56
)

// ublkBasicParams builds the parameters for a device of devSectors
// 512-byte sectors with logical blocks of 1<<lbsShift bytes, requests of
// at most maxSectors, and discard/write-zeroes limits unless readOnly.
func ublkBasicParams(lbsShift uint8, devSectors uint64, maxSectors uint32, readOnly bool) ublkParams {
	p := make(ublkParams, ublkParamsLen)
	types := uint32(ublkParamTypeBasic)
	attrs := uint32(ublkAttrVolatileCache) // flushes reach the namespace's write cache
	if readOnly {
		attrs |= ublkAttrReadOnly
	} else {
		types |= ublkParamTypeDiscard
		binary.LittleEndian.PutUint32(p[upDiscardGran:], 1<<lbsShift)
		binary.LittleEndian.PutUint32(p[upMaxDiscard:], ublkMaxDiscardSectors)
		binary.LittleEndian.PutUint32(p[upMaxWriteZeroes:], ublkMaxDiscardSectors)
		binary.LittleEndian.PutUint16(p[upMaxDiscardSegs:], 1) // the driver takes one segment only
	}
	binary.LittleEndian.PutUint32(p[upLen:], ublkParamsLen)
	binary.LittleEndian.PutUint32(p[upTypes:], types)
	binary.LittleEndian.PutUint32(p[upAttrs:], attrs)
	p[upLBSShift] = lbsShift
	p[upPBSShift] = lbsShift
	p[upIOOptShift] = lbsShift
	p[upIOMinShift] = lbsShift
	binary.LittleEndian.PutUint32(p[upMaxSectors:], maxSectors)
	binary.LittleEndian.PutUint64(p[upDevSectors:], devSectors)
	return p
}

// ublkMaxDiscardSectors bounds one discard or write-zeroes request (1 GiB).
const ublkMaxDiscardSectors = 1 << 21

// ublkIODesc is struct ublksrv_io_desc: op_flags(4) nr_sectors(4)
// start_sector(8) addr(8).
type ublkIODesc []byte

func (d ublkIODesc) opFlags() uint32     { return binary.LittleEndian.Uint32(d[0:]) }
func (d ublkIODesc) nrSectors() uint32   { return binary.LittleEndian.Uint32(d[4:]) }
func (d ublkIODesc) startSector() uint64 { return binary.LittleEndian.Uint64(d[8:]) }
func (d ublkIODesc) addr() uint64        { return binary.LittleEndian.Uint64(d[16:]) }

// ublkIOCmd is struct ublksrv_io_cmd: q_id(2) tag(2) result(4) addr(8).
type ublkIOCmd []byte

func (c ublkIOCmd) set(qid, tag uint16, result int32, addr uint64) {
	binary.LittleEndian.PutUint16(c[0:], qid)
	binary.LittleEndian.PutUint16(c[2:], tag)
	binary.LittleEndian.PutUint32(c[4:], uint32(result))
	binary.LittleEndian.PutUint64(c[8:], addr)
}

func (c ublkIOCmd) qid() uint16     { return binary.LittleEndian.Uint16(c[0:]) }
func (c ublkIOCmd) tag() uint16     { return binary.LittleEndian.Uint16(c[2:]) }
func (c ublkIOCmd) result() int32   { return int32(binary.LittleEndian.Uint32(c[4:])) }
func (c ublkIOCmd) bufAddr() uint64 { return binary.LittleEndian.Uint64(c[8:]) }
