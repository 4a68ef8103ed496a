//go:build ibverbs && cgo

package ibverbs

// #cgo LDFLAGS: -libverbs -lrdmacm
import "C"
