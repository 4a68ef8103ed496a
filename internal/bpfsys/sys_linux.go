//go:build linux && (amd64 || arm64 || riscv64 || ppc64le || loong64)

package bpfsys

import (
	"bytes"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Supported reports whether this build can make bpf(2) calls.
const Supported = true

// The attribute structures below are the prefixes of union bpf_attr that
// each command reads; the kernel treats the rest of the union as zero.
// Pointers are unsafe.Pointer so that the garbage collector sees them
// while the kernel reads through them (8 bytes, as __aligned_u64, on the
// 64-bit platforms this file builds on).

type mapCreateAttr struct {
	mapType    uint32
	keySize    uint32
	valueSize  uint32
	maxEntries uint32
	mapFlags   uint32
	innerMapFD uint32
	numaNode   uint32
	name       [16]byte
}

type mapElemAttr struct {
	mapFD uint32
	_     uint32
	key   unsafe.Pointer
	value unsafe.Pointer
	flags uint64
}

type progLoadAttr struct {
	progType           uint32
	insnCnt            uint32
	insns              unsafe.Pointer
	license            unsafe.Pointer
	logLevel           uint32
	logSize            uint32
	logBuf             unsafe.Pointer
	kernVersion        uint32
	progFlags          uint32
	name               [16]byte
	progIfindex        uint32
	expectedAttachType uint32
}

type getFDByIDAttr struct {
	id        uint32
	nextID    uint32
	openFlags uint32
}

type objInfoAttr struct {
	fd      uint32
	infoLen uint32
	info    unsafe.Pointer
}

// MapInfo is the start of struct bpf_map_info.
type MapInfo struct {
	Type       uint32
	ID         uint32
	KeySize    uint32
	ValueSize  uint32
	MaxEntries uint32
	MapFlags   uint32
	Name       [16]byte
}

func bpf(cmd int, attr unsafe.Pointer, size uintptr) (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_BPF, uintptr(cmd), uintptr(attr), size)
	if errno != 0 {
		return -1, errno
	}
	return int(r), nil
}

// objName returns s as a BPF object name (at most 15 bytes and a NUL).
func objName(s string) (n [16]byte) {
	copy(n[:15], s)
	return n
}

// CreateMap creates a map (BPF_MAP_CREATE) and returns its descriptor.
func CreateMap(mapType, keySize, valueSize, maxEntries uint32, name string) (int, error) {
	a := mapCreateAttr{mapType: mapType, keySize: keySize, valueSize: valueSize, maxEntries: maxEntries, name: objName(name)}
	fd, err := bpf(unix.BPF_MAP_CREATE, unsafe.Pointer(&a), unsafe.Sizeof(a))
	if err != nil {
		return -1, fmt.Errorf("bpf: creating map %s: %w", name, err)
	}
	return fd, nil
}

// UpdateElem sets key to value in map fd (BPF_MAP_UPDATE_ELEM with flags
// BPF_ANY, BPF_NOEXIST or BPF_EXIST).
func UpdateElem(fd int, key, value []byte, flags uint64) error {
	a := mapElemAttr{mapFD: uint32(fd), key: unsafe.Pointer(&key[0]), value: unsafe.Pointer(&value[0]), flags: flags}
	_, err := bpf(unix.BPF_MAP_UPDATE_ELEM, unsafe.Pointer(&a), unsafe.Sizeof(a))
	runtime.KeepAlive(key)
	runtime.KeepAlive(value)
	if err != nil {
		return fmt.Errorf("bpf: map update: %w", err)
	}
	return nil
}

// MapFDByID opens the map whose ID is id (BPF_MAP_GET_FD_BY_ID; needs
// CAP_SYS_ADMIN).
func MapFDByID(id uint32) (int, error) {
	a := getFDByIDAttr{id: id}
	fd, err := bpf(unix.BPF_MAP_GET_FD_BY_ID, unsafe.Pointer(&a), unsafe.Sizeof(a))
	if err != nil {
		return -1, fmt.Errorf("bpf: map %d: %w", id, err)
	}
	return fd, nil
}

// MapInfoByFD describes map fd (BPF_OBJ_GET_INFO_BY_FD).
func MapInfoByFD(fd int) (MapInfo, error) {
	var info MapInfo
	a := objInfoAttr{fd: uint32(fd), infoLen: uint32(unsafe.Sizeof(info)), info: unsafe.Pointer(&info)}
	if _, err := bpf(unix.BPF_OBJ_GET_INFO_BY_FD, unsafe.Pointer(&a), unsafe.Sizeof(a)); err != nil {
		return MapInfo{}, fmt.Errorf("bpf: map info: %w", err)
	}
	return info, nil
}

// NameString returns the map's name up to its NUL.
func (m MapInfo) NameString() string {
	if i := bytes.IndexByte(m.Name[:], 0); i >= 0 {
		return string(m.Name[:i])
	}
	return string(m.Name[:])
}

// LoadProg loads a program (BPF_PROG_LOAD) of type progType with the
// expected attach type attach, and returns its descriptor. When the
// kernel refuses it, the error carries the verifier's log.
func LoadProg(progType, attach uint32, prog []Insn, license, name string) (int, error) {
	insns := Encode(prog)
	lic := append([]byte(license), 0)
	logBuf := make([]byte, 64<<10)
	a := progLoadAttr{progType: progType, insnCnt: uint32(len(prog)), insns: unsafe.Pointer(&insns[0]),
		license: unsafe.Pointer(&lic[0]), name: objName(name), expectedAttachType: attach}
	fd, err := bpf(unix.BPF_PROG_LOAD, unsafe.Pointer(&a), unsafe.Sizeof(a))
	if err == unix.EINVAL || err == unix.EACCES {
		// Load again with the verifier's log to say why.
		a.logLevel, a.logSize, a.logBuf = 1, uint32(len(logBuf)), unsafe.Pointer(&logBuf[0])
		fd, err = bpf(unix.BPF_PROG_LOAD, unsafe.Pointer(&a), unsafe.Sizeof(a))
	}
	runtime.KeepAlive(insns)
	runtime.KeepAlive(lic)
	runtime.KeepAlive(logBuf)
	if err != nil {
		if i := bytes.IndexByte(logBuf, 0); i > 0 {
			return -1, fmt.Errorf("bpf: loading program %s: %w (verifier: %s)", name, err, bytes.TrimSpace(logBuf[:i]))
		}
		return -1, fmt.Errorf("bpf: loading program %s: %w", name, err)
	}
	return fd, nil
}
