package config

import (
	"path/filepath"
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
