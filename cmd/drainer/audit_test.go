package main

import (
	"strings"
	"testing"
)

func TestAuditVerifyCommand(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t)
	k := d.enqueue("run-1", "charge_card", 2)
	d.set(k[0], "succeeded", 1)
	code, out, errb := d.run("audit", "verify")
	want(t, code, errb, 0)
	if strings.TrimSpace(out) != "audit: 3 entries in 2 chains verified" {
		t.Fatalf("verify: %q", out)
	}
	d.exec(`UPDATE drainer.audit SET actor = 'mallory' WHERE id = 1`)
	code, out, errb = d.run("audit", "verify")
	want(t, code, errb, 1, "1 broken link(s)")
	if !strings.Contains(out, "edited") || !strings.HasPrefix(strings.Split(out, "\n")[1], "1 ") {
		t.Fatalf("verify output:\n%s", out)
	}
	code, out, _ = d.run("audit", "verify", "--output", "json")
	var v map[string]any
	decode(t, out, &v)
	if code != 1 || v["ok"] != false || len(v["broken"].([]any)) != 1 {
		t.Fatalf("verify json = %v (exit %d)", v, code)
	}
}
