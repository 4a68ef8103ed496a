//go:build !(linux && (amd64 || arm64 || riscv64 || ppc64le || loong64))

package bpfsys

import (
	"errors"
	"fmt"
)

// Supported reports whether this build can make bpf(2) calls.
const Supported = false

// MapInfo is the start of struct bpf_map_info.
type MapInfo struct {
	Type, ID, KeySize, ValueSize, MaxEntries, MapFlags uint32
	Name                                               [16]byte
}

var errUnsupported = fmt.Errorf("bpf: not on this platform: %w", errors.ErrUnsupported)

// CreateMap is not supported on this platform.
func CreateMap(_, _, _, _ uint32, _ string) (int, error) { return -1, errUnsupported }

// UpdateElem is not supported on this platform.
func UpdateElem(int, []byte, []byte, uint64) error { return errUnsupported }

// MapFDByID is not supported on this platform.
func MapFDByID(uint32) (int, error) { return -1, errUnsupported }

// MapInfoByFD is not supported on this platform.
func MapInfoByFD(int) (MapInfo, error) { return MapInfo{}, errUnsupported }

// NameString returns the map's name.
func (m MapInfo) NameString() string { return "" }

// LoadProg is not supported on this platform.
func LoadProg(_, _ uint32, _ []Insn, _, _ string) (int, error) { return -1, errUnsupported }
