package control

import (
	"testing"

	"github.com/nvmeof/nvmeof/configfs"
)

// TestNamespaceQueueDepth: the control API shows a file or block
// namespace's effective queue depth (none for memory) and changes it.
func TestNamespaceQueueDepth(t *testing.T) {
	tests := []struct {
		name    string
		ns      configfs.Namespace
		set     *int
		want    *int
		wantCfg int
	}{
		{"file default", configfs.Namespace{NSID: 1, Backend: configfs.BackendFile}, nil, ptr(configfs.DefaultQueueDepth), 0},
		{"block set", configfs.Namespace{NSID: 1, Backend: configfs.BackendBlock}, ptr(32), ptr(32), 32},
		{"memory", configfs.Namespace{NSID: 1, Backend: configfs.BackendMemory}, nil, nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ns := tc.ns
			if err := setNamespace(&ns, &Namespace{QueueDepth: tc.set}); err != nil {
				t.Fatal(err)
			}
			if ns.QueueDepth != tc.wantCfg {
				t.Fatalf("configured %d, want %d", ns.QueueDepth, tc.wantCfg)
			}
			got := namespaceInfo("nqn.2026-11.io.nvmeof:qd", &ns).QueueDepth
			if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
				t.Fatalf("shown %v, want %v", got, tc.want)
			}
		})
	}
}
