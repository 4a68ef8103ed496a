// Package nvme holds the NVMe base specification as data: submission and completion queue entries (SQE, CQE), opcodes, status codes, Identify structures, log pages and features. It encodes and decodes; it does no I/O.
package nvme
