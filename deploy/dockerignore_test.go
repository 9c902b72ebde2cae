package deploy

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// TestDockerignore: the image's build context holds what `go build
// ./cmd/drainer` reads (go.mod, go.sum and every package of the binary)
// and none of the node_modules trees the tests install (tens of MB), read
// with the matcher docker itself uses.
func TestDockerignore(t *testing.T) {
	f, err := os.Open("../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	excluded := func(path string) bool {
		ok, err := pm.MatchesOrParentMatches(filepath.ToSlash(path))
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}

	// What the build reads: the module's files and the binary's packages.
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if .Module}}{{if .Module.Main}}{{.Dir}}{{end}}{{end}}", "../cmd/drainer").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	needed := []string{"go.mod", "go.sum"}
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		needed = append(needed, filepath.Join(rel, "doc.go"), rel)
	}
	for _, p := range needed {
		if excluded(p) {
			t.Errorf(".dockerignore leaves %s out of the build context; go build ./cmd/drainer needs it", p)
		}
	}

	// Every node_modules in the tree, and one anywhere a test could make one.
	mods := []string{"sdk/typescript/node_modules", "integration/testdata/any/node_modules", "node_modules"}
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if d.Name() == ".git" {
			return filepath.SkipDir
		}
		if d.Name() == "node_modules" {
			rel, _ := filepath.Rel(root, path)
			mods = append(mods, rel)
			return filepath.SkipDir
		}
		return nil
	})
	for _, m := range mods {
		if !excluded(filepath.Join(m, "some-package", "index.js")) {
			t.Errorf(".dockerignore lets %s into the build context", m)
		}
	}
}
