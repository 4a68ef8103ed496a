package runner

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nvmeof/nvmeof/bench/report"
)

// WriteResults writes r as JSON to jsonPath, its chart as PNG and the
// chart's data as CSV beside it (same name, .png and .csv), and, when
// outDir is not empty, dated copies of the three there
// (NAME-20060102T150405Z.json, .png and .csv). It returns the paths
// written.
func WriteResults(r *report.Report, jsonPath, outDir string) ([]string, error) {
	js, err := r.MarshalIndent()
	if err != nil {
		return nil, err
	}
	ch := r.Chart()
	var img, table bytes.Buffer
	if err := ch.WritePNG(&img); err != nil {
		return nil, err
	}
	if err := ch.WriteCSV(&table); err != nil {
		return nil, err
	}
	type file struct {
		path string
		data []byte
	}
	withExts := func(base string) []file {
		return []file{{base + ".json", js}, {base + ".png", img.Bytes()}, {base + ".csv", table.Bytes()}}
	}
	base := strings.TrimSuffix(jsonPath, filepath.Ext(jsonPath))
	files := withExts(base)
	files[0].path = jsonPath
	if outDir != "" {
		if err := os.MkdirAll(outDir, 0o755); err != nil {
			return nil, fmt.Errorf("results: %w", err)
		}
		files = append(files, withExts(filepath.Join(outDir, filepath.Base(base)+"-"+r.Started.UTC().Format("20060102T150405Z")))...)
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
