package initiator_test

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/fabrics/loop"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/target"
	"github.com/nvmeof/nvmeof/target/bdev"
)

// Connect to a target served over the in-memory loop transport, write a
// block and read it back.
func Example() {
	const nqn = "nqn.2026-11.io.nvmeof:example"
	host := "nqn.2014-08.org.nvmexpress:uuid:6c1b0f8e-2b9c-4d0a-9a6e-3f8e2c1d0b7a"
	addr := fabrics.Address{Transport: fabrics.TransportLoop, Addr: netip.MustParseAddr("127.0.0.1"), ServiceID: fabrics.DefaultServiceID}

	// A target with one 1 MiB memory namespace.
	tgt := target.New(target.Options{})
	defer tgt.Close()
	_ = tgt.AddSubsystem(target.SubsystemConfig{NQN: nqn, AllowAnyHost: true})
	mem, _ := bdev.NewMemory(1<<20, 512)
	_ = tgt.AddNamespace(nqn, target.NamespaceConfig{NSID: 1, Device: mem})
	_ = tgt.AddPort(target.PortConfig{ID: 1, Address: addr, Subsystems: []string{nqn}})
	net := loop.NewNetwork()
	l, _ := net.Listen(addr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = tgt.Serve(ctx, 1, l) }()

	// The host.
	c, err := initiator.Connect(ctx, loop.Dialer{Net: net}, addr, initiator.Options{SubsystemNQN: nqn, HostNQN: host})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	ns, _ := c.Namespace(1)
	block := make([]byte, ns.BlockSize())
	copy(block, "hello")
	if _, err := ns.WriteAt(block, 4096); err != nil {
		fmt.Println(err)
		return
	}
	got := make([]byte, len(block))
	if _, err := ns.ReadAt(got, 4096); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d bytes, %d-byte blocks: %s\n", ns.Size(), ns.BlockSize(), got[:5])
	// Output: 1048576 bytes, 512-byte blocks: hello
}
