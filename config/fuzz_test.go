package config

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// FuzzParse checks that no input crashes the loader, that every failure is
// an Errors of located messages, and that a secret from the environment or
// a file never shows up in a message.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"testdata/example.yaml", "testdata/all_types.yaml"} {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, false)
	}
	for _, seed := range []string{
		"", "# c\n", "- a\n", "a: [1\n", "workers: x\nlease: -1s\n",
		"adapters:\n  a: &x {type: http, <<: *x}\n",
		"adapters: {p: {type: http, url: 'http://h/{tool_name}', headers: {Authorization: 'Bearer ${env:T}'}}}\nroutes: {t: {adapter: p}}\n",
		"database_url: ${file:/secret}\nworkers: ${env:T}\n",
		"databases:\n  static:\n    - {name: a, url: '${env:A}'}\n    - ~\n    - {name: '${env:N}', url: x}\n  query: {url: '${file:/c}', sql: SELECT 1}\n  refresh: 0s\n",
		"databases:\n  static: [&e {name: a, url: 'host=a'}, *e, {<<: *e, name: b}]\n",
	} {
		f.Add([]byte(seed), true)
	}
	const secret = "s3cr3t-fuzz-value"
	opts := LoadOptions{
		LookupEnv: func(string) (string, bool) { return secret, true },
		ReadFile:  func(string) ([]byte, error) { return []byte(secret + "\n"), nil },
	}
	f.Fuzz(func(t *testing.T, data []byte, check bool) {
		if strings.Contains(string(data), secret) {
			return
		}
		opts.Check = check
		cfg, err := Parse("fuzz.yaml", data, opts)
		if err != nil {
			if _, ok := errors.AsType[Errors](err); !ok {
				t.Fatalf("error is %T, want Errors", err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("error reveals an expanded value: %v", err)
			}
			return
		}
		for _, w := range cfg.Warnings {
			if strings.Contains(w, secret) {
				t.Fatalf("warning reveals an expanded value: %s", w)
			}
		}
		_ = cfg.Summary()
	})
}
