package tests

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// goBuildLine finds a go build command in Markdown: leading VAR=value
// settings, go build, and what follows up to the end of the code span,
// a comment, a parenthesis or semicolon of prose, or the line's end.
var goBuildLine = regexp.MustCompile(`((?:[A-Z_]+=\S+\s+)*go build\s[^` + "`" + `#\n);]*)`)

// readmeBuilds returns the go build commands of the repository's Markdown
// files that name packages (./...), by file.
func readmeBuilds(t *testing.T, root string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "out" || d.Name() == "bench-out") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".md") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range goBuildLine.FindAllString(string(b), -1) {
			if strings.Contains(m, " ./") {
				rel, _ := filepath.Rel(root, p)
				out[rel] = append(out[rel], strings.TrimSpace(m))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReadmeBuildsBinaries: every go build line of the documentation
// writes a binary for each package it names. go build with several
// packages and no -o only checks that they compile: README's ibverbs line
// ran for 1.5 minutes, exited 0 and left the soft-only binaries in place.
// go build -n (print, do not run) shows where each binary would go.
func TestReadmeBuildsBinaries(t *testing.T) {
	root := filepath.Join("..")
	builds := readmeBuilds(t, root)
	if len(builds["README.md"]) < 4 {
		t.Fatalf("README.md: %d go build lines found, want 4 or more: %v", len(builds["README.md"]), builds["README.md"])
	}
	for file, lines := range builds {
		for _, line := range lines {
			t.Run(file+": "+line, func(t *testing.T) {
				var env, args []string
				pkgs := 0
				for _, f := range strings.Fields(line) {
					switch {
					case len(args) == 0 && strings.Contains(f, "=") && f != "go":
						env = append(env, f)
					case f == "go" || f == "build" && len(args) == 1:
						args = append(args, f)
					default:
						if strings.HasPrefix(f, "./") {
							pkgs++
						}
						args = append(args, f)
					}
				}
				// -n after "build": the commands are printed, not run; -a:
				// all of them, even where a binary is up to date.
				args = append([]string{args[0], args[1], "-n", "-a"}, args[2:]...)
				cmd := exec.Command(args[0], args[1:]...)
				cmd.Dir = root
				cmd.Env = append(os.Environ(), env...)
				b, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, b)
				}
				var dests []string
				for _, l := range strings.Split(string(b), "\n") {
					if strings.HasPrefix(l, "mv $WORK/") && strings.Contains(l, "/exe/a.out ") {
						dests = append(dests, l[strings.LastIndex(l, " ")+1:])
					}
				}
				if len(dests) != pkgs {
					t.Errorf("%s writes %d binaries %v for %d packages: with several packages, give -o a directory (-o . or -o out/)", line, len(dests), dests, pkgs)
				}
			})
		}
	}
}
