package runner

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nvmeof/nvmeof/bench/report"
)

// WriteResults writes r as JSON to jsonPath and its chart as PNG beside it
// (same name, .png), and, when outDir is not empty, dated copies of both
// there (NAME-20060102T150405Z.json and .png). It returns the paths written.
func WriteResults(r *report.Report, jsonPath, outDir string) ([]string, error) {
	js, err := r.MarshalIndent()
	if err != nil {
		return nil, err
	}
	var img bytes.Buffer
	if err := r.Chart().WritePNG(&img); err != nil {
		return nil, err
	}
	base := strings.TrimSuffix(jsonPath, filepath.Ext(jsonPath))
	files := []struct {
		path string
		data []byte
	}{{jsonPath, js}, {base + ".png", img.Bytes()}}
	if outDir != "" {
		if err := os.MkdirAll(outDir, 0o755); err != nil {
			return nil, fmt.Errorf("results: %w", err)
		}
		dated := filepath.Join(outDir, filepath.Base(base)+"-"+r.Started.UTC().Format("20060102T150405Z"))
		files = append(files, struct {
			path string
			data []byte
		}{dated + ".json", js}, struct {
			path string
			data []byte
		}{dated + ".png", img.Bytes()})
	}
	var paths []string
	for _, f := range files {
		if dir := filepath.Dir(f.path); dir != "." {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return paths, fmt.Errorf("results: %w", err)
			}
		}
		if err := os.WriteFile(f.path, f.data, 0o644); err != nil {
			return paths, fmt.Errorf("results: %w", err)
		}
		paths = append(paths, f.path)
	}
	return paths, nil
}
