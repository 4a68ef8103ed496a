// Package rbd tests the Ceph RBD backend end to end (build tag rbd): a
// throwaway cluster (internal/cephtest, started once by TestMain and
// purged at the end), the in-process target serving an RBD image over the
// soft RoCE provider on 127.0.61.1, and package initiator writing through
// it from 127.0.61.2. Without the tag, or without the Ceph packages, there
// is nothing to run.
package rbd
