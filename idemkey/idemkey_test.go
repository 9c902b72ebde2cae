package idemkey

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

type vector struct {
	AgentRunID    string `json:"agent_run_id"`
	StepID        string `json:"step_id"`
	ToolName      string `json:"tool_name"`
	BusinessScope string `json:"business_scope"`
	Canonical     string `json:"canonical"`
	Key           string `json:"key"`
}

// loadVectors reads the shared key vectors from testdata.
func loadVectors(t testing.TB) []vector {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "key-vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct{ Vectors []vector }
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Vectors) == 0 {
		t.Fatal("no vectors in testdata/key-vectors.json")
	}
	return f.Vectors
}

func TestKeyVectors(t *testing.T) {
	for _, v := range loadVectors(t) {
		tup := Tuple{v.AgentRunID, v.StepID, v.ToolName, v.BusinessScope}
		if got := string(tup.Canonical()); got != v.Canonical {
			t.Errorf("canonical(%q):\n got %s\nwant %s", v.AgentRunID, got, v.Canonical)
		}
		if got := tup.Key(); got != v.Key {
			t.Errorf("key(%q) = %s, want %s", v.AgentRunID, got, v.Key)
		}
	}
}

// TestVectorsMatchShared fails when the testdata copy drifts from the shared
// contract file (when the shared folder is present beside the repository).
func TestVectorsMatchShared(t *testing.T) {
	shared := filepath.Join("..", "..", "shared", "key-vectors.json")
	want, err := os.ReadFile(shared)
	if os.IsNotExist(err) {
		t.Logf("%s not present; comparing the copy only", shared)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join("testdata", "key-vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("testdata/key-vectors.json differs from %s: copy the shared file again", shared)
	}
}

func TestValidate(t *testing.T) {
	ok := Tuple{"run", "step", "tool", ""}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid tuple rejected: %v", err)
	}
	cases := map[string]struct {
		tup  Tuple
		want string
	}{
		"empty run":  {Tuple{"", "s", "t", "b"}, "agent_run_id must not be empty"},
		"empty step": {Tuple{"r", "", "t", "b"}, "step_id must not be empty"},
		"empty tool": {Tuple{"r", "s", "", "b"}, "tool_name must not be empty"},
		"nul":        {Tuple{"r\x00", "s", "t", "b"}, "agent_run_id contains a NUL byte"},
		"bad utf8":   {Tuple{"r", "s", "t", "\xff"}, "business_scope is not valid UTF-8"},
		"too long":   {Tuple{"r", strings.Repeat("x", MaxFieldBytes+1), "t", ""}, "step_id is 1025 bytes"},
	}
	for name, c := range cases {
		err := c.tup.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want error containing %q", name, err, c.want)
		}
	}
}

func TestEncodedRoundTrip(t *testing.T) {
	tup := Tuple{"run", "step", "tool", "scope"}
	if strings.Contains(tup.Encoded(), "=") {
		t.Fatalf("encoded tuple has padding: %s", tup.Encoded())
	}
}

// FuzzCanonical checks that the canonical form is always valid JSON that decodes
// back to the same tuple, for any valid UTF-8 input.
func FuzzCanonical(f *testing.F) {
	for _, v := range loadVectors(f) {
		f.Add(v.AgentRunID, v.StepID, v.ToolName, v.BusinessScope)
	}
	f.Fuzz(func(t *testing.T, a, s, tool, b string) {
		tup := Tuple{a, s, tool, b}
		var back Tuple
		if err := json.Unmarshal(tup.Canonical(), &back); err != nil {
			t.Fatalf("canonical is not JSON: %v: %q", err, tup.Canonical())
		}
		valid := utf8.ValidString(a) && utf8.ValidString(s) && utf8.ValidString(tool) && utf8.ValidString(b)
		if valid && back != tup {
			// Invalid UTF-8 is replaced by the decoder; only compare valid input.
			t.Fatalf("round trip changed the tuple: %#v -> %#v", tup, back)
		}
		if k := tup.Key(); len(k) != len(Prefix)+32 {
			t.Fatalf("key has wrong length: %s", k)
		}
	})
}
