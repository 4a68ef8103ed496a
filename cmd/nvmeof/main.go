// Command nvmeof is the nvmeof NVMe over Fabrics initiator: nvme-cli's
// fabrics and admin commands over RDMA (RoCEv2, with a built-in soft RoCE
// provider), mapping each namespace as a local block device, and a
// self-test of the whole stack. The commands live in internal/hostcli.
package main

import (
	"os"

	"github.com/nvmeof/nvmeof/internal/hostcli"
)

func main() {
	os.Exit(hostcli.Run(os.Args, os.Stdout, os.Stderr))
}
