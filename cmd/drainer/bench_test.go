package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestBenchUsageErrors checks that bad flags exit 2 before anything starts;
// internal/bench's tests run the measurements themselves.
func TestBenchUsageErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--workers", "0"}, "--workers (0)"},
		{[]string{"bench", "--replicas", "0"}, "--replicas (0)"},
		{[]string{"bench", "--replicas", "100"}, "replicas (100) must be between 1 and 64"},
		{[]string{"bench", "--schema", "Not-A-Schema"}, "invalid schema name"},
		{[]string{"bench", "extra"}, "unknown command"},
	} {
		var out, errb bytes.Buffer
		if code := execute(c.args, &out, &errb); code != exitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", c.args, code, exitUsage, errb.String())
		}
		if !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: stderr %q lacks %q", c.args, errb.String(), c.want)
		}
		if out.Len() != 0 {
			t.Errorf("%v: wrote %q to stdout", c.args, out.String())
		}
	}
}
