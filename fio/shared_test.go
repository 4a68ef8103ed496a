package fio

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
)

// Addresses of TestFioSharedHostAddress: two targets and one host
// address, distinct from the other tests'.
const (
	sharedTargetA = "127.0.45.1"
	sharedTargetB = "127.0.45.3"
	sharedHost    = "127.0.45.2"
)

// sharedJob is one fio process's jobs: a verified random write to each
// of two targets, from one host address, in its own 8 MiB of each
// namespace (offset).
const sharedJob = `
[global]
ioengine=external:%[1]s
thread
transport=rdma
trsvcid=4420
host_traddr=%[2]s
nsid=1
bs=4k
size=8m
offset=%[3]dm
iodepth=8
rw=randwrite
do_verify=1
verify=crc32c
verify_fatal=1
verify_state_save=0

[target-a]
traddr=%[4]s
subnqn=%[5]s

[target-b]
traddr=%[6]s
subnqn=%[7]s
`

// TestFioSharedHostAddress runs two fio processes at once, each with two
// jobs against two nvmetd targets, every job from one host address: four
// controllers in two processes share the address (each process opens
// one soft device, shared with the other's). Every job's verify pass
// must find its data.
func TestFioSharedHostAddress(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("shared soft RoCE devices need root")
	}
	so := engine(t)
	nqn := func(s string) string { return "nqn.2026-12.io.nvmeof:fio-shared-" + s }
	for _, tg := range []struct{ addr, name string }{{sharedTargetA, "a"}, {sharedTargetB, "b"}} {
		startNvmetd(t, memoryTargetHCL(tg.addr, nqn(tg.name), "32MiB"))
	}
	var wg sync.WaitGroup
	errs := make([]string, 2)
	for p := range 2 {
		job := writeJob(t, fmt.Sprintf(sharedJob, so, sharedHost, 8*p, sharedTargetA, nqn("a"), sharedTargetB, nqn("b")))
		wg.Add(1)
		go func() {
			defer wg.Done()
			jobs, out, err := runFio(t, job)
			if err != nil {
				errs[p] = fmt.Sprintf("fio process %d: %v\n%s", p, err, out)
				return
			}
			for _, name := range []string{"target-a", "target-b"} {
				j := jobs[name]
				if j.Error != 0 || j.Write.IOBytes != 8<<20 || j.Read.IOBytes != 8<<20 {
					errs[p] += fmt.Sprintf("fio process %d job %s: error %d, wrote %d, verified %d bytes\n%s\n", p, name, j.Error, j.Write.IOBytes, j.Read.IOBytes, out)
				}
			}
		}()
	}
	wg.Wait()
	if msg := strings.Join(errs, ""); msg != "" {
		t.Fatal(msg)
	}
}
