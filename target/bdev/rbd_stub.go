//go:build !rbd

package bdev

import "errors"

// ErrNoRBD is what the rbd backend returns in a binary built without the
// rbd build tag (no librbd linked in).
var ErrNoRBD = errors.New("this nvmetd was built without RBD support: build with -tags rbd")

// RBDSupported reports whether the binary was built with the rbd tag.
const RBDSupported = false

// OpenRBD fails with ErrNoRBD: the binary was built without the rbd tag.
func OpenRBD(spec Spec) (Device, error) { return nil, ErrNoRBD }

// CheckRBD fails with ErrNoRBD: the binary was built without the rbd tag.
func CheckRBD(spec Spec) error { return ErrNoRBD }
