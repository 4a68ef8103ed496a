package configfs

import (
	"strings"
	"testing"
)

// TestPortPoolKnobs: a port's data_pool_size (bytes or a size string)
// and srq_size (0: no SRQ) parse, survive HCL(), and are left out when
// unset; srq_size beyond MaxSRQSize is refused.
func TestPortPoolKnobs(t *testing.T) {
	const src = `
port "a" {
  address        = "127.0.0.1"
  data_pool_size = "32MiB"
  srq_size       = 0
}
port "b" {
  address = "127.0.0.2"
  service = 4421
}
`
	tree, err := ParseHCL([]byte(src), "knobs.hcl")
	if err != nil {
		t.Fatal(err)
	}
	a, b := tree.Ports[0], tree.Ports[1]
	if a.DataPoolSize != 32<<20 || a.SRQSize != 0 || b.DataPoolSize != 0 || b.SRQSize != -1 {
		t.Fatalf("a: %d bytes, srq %d; b: %d bytes, srq %d", a.DataPoolSize, a.SRQSize, b.DataPoolSize, b.SRQSize)
	}
	out := string(tree.HCL())
	if !strings.Contains(out, "data_pool_size") || strings.Count(out, "srq_size") != 1 {
		t.Fatalf("HCL():\n%s", out)
	}
	again, err := ParseHCL([]byte(out), "again.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if a2 := again.Ports[0]; a2.DataPoolSize != a.DataPoolSize || a2.SRQSize != a.SRQSize || again.Ports[1].SRQSize != -1 {
		t.Fatalf("after HCL(): %d bytes, srq %d", a2.DataPoolSize, a2.SRQSize)
	}
	if _, err := ParseHCL([]byte("port \"c\" {\n  address = \"127.0.0.3\"\n  srq_size = 70000\n}\n"), "bad.hcl"); err == nil || !strings.Contains(err.Error(), "srq_size") {
		t.Fatalf("srq_size 70000: %v", err)
	}
}
