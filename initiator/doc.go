// Package initiator is the NVMe-oF host: discovery, connect (admin and I/O queues), and namespaces as io.ReaderAt and io.WriterAt with flush and trim.
package initiator
