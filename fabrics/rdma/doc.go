// Package rdma is the NVMe-oF RDMA transport binding for both sides: CM private data (request, accept, reject), command capsules by SEND, data by RDMA READ/WRITE from keyed SGLs, in-capsule data by offset SGLs, completions by SEND or SEND with Invalidate.
package rdma
