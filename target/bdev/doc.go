// Package bdev holds the block backends behind a namespace (file, block device, memory, null) behind one small interface.
package bdev
