package ops

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/drainer-io/drainer/store/storetest"
)

// TestInspectReportsATamperedTrail: inspect verifies the key's audit
// trail in the snapshot it shows: a key whose trail holds reports no
// problem, one whose entry was edited reports it, by entry, in its JSON
// too.
func TestInspectReportsATamperedTrail(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := e.enqueue("r1", "charge", 2)
	e.set(k[0], "succeeded", 1)
	e.set(k[1], "succeeded", 1)
	edited := storetest.TamperEdit(t, e.pool, k[1])

	in, err := e.c.Inspect(t.Context(), k[0])
	if err != nil {
		t.Fatal(err)
	}
	if in.AuditProblems == nil || len(in.AuditProblems) != 0 {
		t.Fatalf("an untouched trail: problems %v; want none (and an empty list, not null)", in.AuditProblems)
	}
	in, err = e.c.Inspect(t.Context(), k[1])
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range in.AuditProblems {
		found = found || p.ID == edited
	}
	if !found {
		t.Fatalf("a trail whose entry %d was edited: problems %+v; want that entry named", edited, in.AuditProblems)
	}
	buf, _ := json.Marshal(in)
	if !bytes.Contains(buf, []byte(`"audit_problems":[{`)) {
		t.Errorf("the JSON of a tampered key's inspection lacks its problems: %s", buf)
	}
}
