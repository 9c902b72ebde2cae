package config

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestShippedExamplesLoad keeps the documented example configs valid.
func TestShippedExamplesLoad(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "examples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no example configs found: %v", err)
	}
	for _, f := range files {
		cfg, err := Load(f, LoadOptions{Check: true, LookupEnv: func(string) (string, bool) { return "", false }})
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if len(cfg.Routes) == 0 {
			t.Errorf("%s: no routes", f)
		}
	}
}

// TestDocsNameOneExampleConfig: the README, the deploy docs and the
// reference name one example config, examples/drainer.yaml, and it is the
// only config under examples/ (a new user is never sent to two examples, or
// to a test fixture, for the same thing).
func TestDocsNameOneExampleConfig(t *testing.T) {
	const example = "examples/drainer.yaml"
	files, err := filepath.Glob(filepath.Join("..", "examples", "*.y*ml"))
	if err != nil || len(files) != 1 || filepath.ToSlash(files[0]) != "../"+example {
		t.Fatalf("example configs under examples/: %v (%v), want only %s", files, err, example)
	}
	mention := regexp.MustCompile(`[\w./-]*(?:examples|testdata)/[\w./-]*\.ya?ml`)
	docs := []string{"../README.md", "../deploy/README.md", "../deploy/configmap.yaml", "../docs/reference.md"}
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		named := false
		for _, m := range mention.FindAllString(string(b), -1) {
			if m != example {
				t.Errorf("%s names %s as a config; the one example config is %s", doc, m, example)
			}
			named = true
		}
		if !named {
			t.Errorf("%s does not name the example config %s", doc, example)
		}
	}
}
