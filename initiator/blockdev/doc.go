// Package blockdev maps a namespace as a local block device: kernel NBD where it exists, otherwise a FUSE file attached to a loop device.
package blockdev
