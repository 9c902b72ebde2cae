package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestExpand(t *testing.T) {
	tests := []struct {
		raw   string
		want  string
		refs  int
		errs  []string
		check []string // warnings in check mode (the value is then incomplete)
	}{
		{raw: "plain", want: "plain"},
		{raw: "", want: ""},
		{raw: "${env:PAYMENTS_TOKEN}", want: "pay-token-1", refs: 1},
		{raw: "Bearer ${env:PAYMENTS_TOKEN}", want: "Bearer pay-token-1", refs: 1},
		{raw: "${env:PAYMENTS_TOKEN}:${env:BACKUP_TOKEN}", want: "pay-token-1:backup-token-1", refs: 2},
		{raw: "${env:EMPTY}", want: "", refs: 1},
		{raw: "$${env:PAYMENTS_TOKEN}", want: "${env:PAYMENTS_TOKEN}"},
		{raw: "cost: $5 and $$ and $", want: "cost: $5 and $$ and $"},
		{raw: "$$${env:EMPTY}x", want: "$${env:EMPTY}x"}, // "$" then the escape "$${"
		{raw: "${file:/run/secrets/stripe_key}", want: "sk_test_123", refs: 1},
		{raw: "${file:/run/secrets/two_lines}", want: "line1\nline2\n", refs: 1},
		{raw: "${file:/run/secrets/crlf}", want: "value", refs: 1},
		{raw: "no ${env:PAYMENTS_TOKEN recursion", errs: []string{`unterminated "${" (a reference ends with "}"; write "$${" for a literal "${")`}},
		{raw: "${vault:x}", errs: []string{`unknown reference scheme "vault" in ${vault:x}; use ${env:NAME} or ${file:/path}`}},
		{raw: "${ENV}", errs: []string{`reference ${ENV} has no scheme; use ${env:NAME} or ${file:/path}`}},
		{raw: "${env:}", errs: []string{`invalid environment variable name in ${env:}`}},
		{raw: "${file:}", errs: []string{`${file:} must name an absolute path`}},
		{
			raw:   "a ${env:UNSET_1} b ${file:/nope}",
			refs:  2,
			errs:  []string{"environment variable UNSET_1 is not set (${env:UNSET_1})", "cannot read ${file:/nope}: file does not exist"},
			check: []string{"environment variable UNSET_1 is not set (${env:UNSET_1})", "cannot read ${file:/nope}: file does not exist"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			x := expander{opts: testOptions(false)}
			got := x.expand(tt.raw)
			if strings.Join(got.errs, "|") != strings.Join(tt.errs, "|") || len(got.warns) != 0 {
				t.Fatalf("errs %q warns %q, want errs %q", got.errs, got.warns, tt.errs)
			}
			if len(tt.errs) == 0 && (got.value != tt.want || got.refs != tt.refs || got.unresolved()) {
				t.Errorf("expand = %q (%d refs), want %q (%d refs)", got.value, got.refs, tt.want, tt.refs)
			}

			x = expander{opts: testOptions(true)}
			got = x.expand(tt.raw)
			if tt.check != nil {
				if strings.Join(got.warns, "|") != strings.Join(tt.check, "|") || len(got.errs) != 0 || !got.unresolved() {
					t.Errorf("check mode: warns %q errs %q, want warns %q", got.warns, got.errs, tt.check)
				}
			}
		})
	}
}

func TestExpandNeverExpandsTwice(t *testing.T) {
	x := expander{opts: LoadOptions{LookupEnv: func(string) (string, bool) { return "${env:OTHER}", true }}}
	if got := x.expand("${env:A}"); got.value != "${env:OTHER}" {
		t.Errorf("got %q", got.value)
	}
}

func TestExpandReadsAFileOnce(t *testing.T) {
	reads := 0
	x := expander{opts: LoadOptions{ReadFile: func(string) ([]byte, error) { reads++; return []byte("v\n"), nil }}}
	for range 3 {
		if got := x.expand("${file:/s}"); got.value != "v" {
			t.Fatalf("got %q", got.value)
		}
	}
	if reads != 1 {
		t.Errorf("read %d times", reads)
	}
}

func TestReadFileLimited(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, maxFileReference+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readFileLimited(big); err == nil {
		t.Error("a file above the limit was read")
	}
	if _, err := readFileLimited(dir); err == nil {
		t.Error("a directory was read")
	}
	_, err := readFileLimited(filepath.Join(dir, "none"))
	if !errors.Is(err, os.ErrNotExist) || describeReadError(err) != "no such file or directory" {
		t.Errorf("missing file: %v (%q)", err, describeReadError(err))
	}
}
