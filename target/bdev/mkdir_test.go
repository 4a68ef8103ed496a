package bdev

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFileCreatesDirectories: a file backend to create gets its missing
// directories (mode 0700), Check accepts it without creating anything,
// and a failed creation leaves no directory behind.
func TestFileCreatesDirectories(t *testing.T) {
	root := t.TempDir()
	tests := []struct {
		name    string
		path    string
		size    int64
		wantErr string
		// made: the directory that must exist afterwards ("" none)
		made string
	}{
		{name: "two levels", path: "var/lib/nvmetd/disk.img", size: 1 << 20, made: "var/lib/nvmetd"},
		{name: "existing dir", path: "disk.img", size: 1 << 20},
		{name: "under a file", path: "afile/sub/disk.img", size: 1 << 20, wantErr: "not a directory"},
		{name: "bad size", path: "gone/sub/disk.img", size: 1000, wantErr: "multiple"},
	}
	if err := os.WriteFile(filepath.Join(root, "afile"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := Spec{Kind: KindFile, Path: filepath.Join(root, tt.path), Size: tt.size, BlockSize: 512}
			cerr := Check(spec)
			if top := strings.Split(tt.path, "/")[0]; top != tt.path {
				if _, err := os.Stat(filepath.Join(root, top)); top != "afile" && !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("Check created %s: %v", top, err)
				}
			}
			f, err := OpenFile(spec)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("OpenFile: %v, want an error containing %q", err, tt.wantErr)
				}
				if tt.wantErr != "multiple" && (cerr == nil || !strings.Contains(cerr.Error(), tt.wantErr)) {
					t.Errorf("Check: %v, want an error containing %q", cerr, tt.wantErr)
				}
				if top := strings.Split(tt.path, "/")[0]; top != "afile" {
					if _, err := os.Stat(filepath.Join(root, top)); !errors.Is(err, fs.ErrNotExist) {
						t.Errorf("failed OpenFile left %s: %v", top, err)
					}
				}
				return
			}
			if cerr != nil {
				t.Errorf("Check: %v", cerr)
			}
			if err != nil {
				t.Fatalf("OpenFile: %v", err)
			}
			defer f.Close()
			if tt.made != "" {
				st, err := os.Stat(filepath.Join(root, tt.made))
				if err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
					t.Errorf("directory %s: %v %v", tt.made, st.Mode(), err)
				}
			}
		})
	}
}
