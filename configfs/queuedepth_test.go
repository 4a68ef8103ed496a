package configfs

import (
	"strings"
	"testing"
)

// TestQueueDepth: a namespace's queue_depth parses, survives HCL() and
// nvmetcli JSON, defaults to DefaultQueueDepth, counts as a change of the
// namespace, and is refused outside 1..MaxQueueDepth with the line named.
func TestQueueDepth(t *testing.T) {
	const src = `
subsystem "nqn.2026-11.io.nvmeof:qd" {
  allow_any_host = true
  namespace "1" {
    backend     = "file"
    path        = "/var/lib/nvmetd/a.img"
    size        = "1MiB"
    queue_depth = 32
    buffered_io = true
  }
  namespace "2" {
    backend = "file"
    path    = "/var/lib/nvmetd/b.img"
    size    = "1MiB"
  }
}
`
	tree, err := ParseHCL([]byte(src), "qd.hcl")
	if err != nil {
		t.Fatal(err)
	}
	s := tree.Subsystems[0]
	a, b := s.Namespace(1), s.Namespace(2)
	if a.QueueDepth != 32 || a.EffectiveQueueDepth() != 32 || !a.BufferedIO || b.QueueDepth != 0 || b.EffectiveQueueDepth() != DefaultQueueDepth {
		t.Fatalf("queue depths %d/%d, %d/%d", a.QueueDepth, a.EffectiveQueueDepth(), b.QueueDepth, b.EffectiveQueueDepth())
	}
	out := string(tree.HCL())
	if strings.Count(out, "queue_depth") != 1 {
		t.Fatalf("HCL():\n%s", out)
	}
	again, err := ParseHCL([]byte(out), "again.hcl")
	if err != nil || again.Subsystems[0].Namespace(1).QueueDepth != 32 {
		t.Fatalf("after HCL(): %v", err)
	}
	js, err := tree.NvmetcliJSON()
	if err != nil {
		t.Fatal(err)
	}
	fromJSON, err := ParseNvmetcliJSON(js, "qd.json")
	if err != nil || fromJSON.Subsystems[0].Namespace(1).QueueDepth != 32 || !fromJSON.Subsystems[0].Namespace(1).BufferedIO {
		t.Fatalf("through nvmetcli JSON: %v\n%s", err, js)
	}
	if !Equal(tree, again) {
		t.Fatal("the tree differs from its own HCL")
	}
	changed := strings.Replace(src, "queue_depth = 32", "queue_depth = 64", 1)
	other, err := ParseHCL([]byte(changed), "qd2.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if c := Diff(tree, other); len(c.Subsystems) != 1 || len(c.Subsystems[0].NamespacesChanged) != 1 {
		t.Fatalf("a queue depth change: %+v", c)
	}
	explicit := strings.Replace(src, "    size    = \"1MiB\"\n  }", "    size    = \"1MiB\"\n    queue_depth = 128\n  }", 1)
	if other, err = ParseHCL([]byte(explicit), "qd3.hcl"); err != nil || !Equal(tree, other) {
		t.Fatalf("queue_depth = 128 written out differs from the default: %v", err)
	}
	for _, bad := range []string{"0", "4097", "-1", "\"deep\""} {
		_, err := ParseHCL([]byte(strings.Replace(src, "queue_depth = 32", "queue_depth = "+bad, 1)), "bad.hcl")
		if err == nil || !strings.Contains(err.Error(), "queue_depth") || !strings.Contains(err.Error(), "bad.hcl:8") {
			t.Fatalf("queue_depth = %s: %v", bad, err)
		}
	}
}
