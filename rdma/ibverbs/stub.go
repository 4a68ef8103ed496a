//go:build !ibverbs || !cgo

package ibverbs

import "fmt"

// Built reports whether the provider is built into this binary.
const Built = false

// Open fails: the provider is not built in.
func Open(cfg Config) (Device, error) {
	return nil, fmt.Errorf("ibverbs: %w", ErrNotBuilt)
}

// Devices fails: the provider is not built in.
func Devices() ([]DeviceInfo, error) {
	return nil, fmt.Errorf("ibverbs: %w", ErrNotBuilt)
}
