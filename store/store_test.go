package store

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/drainer-io/drainer/outbox"
)

// TestSQLExpandsEachStatementOnce: sql places the schema and the
// vocabulary as it always did, expands a statement once per Store (the
// second call returns the kept text), keeps one entry per distinct
// statement, and keeps nothing of one Store in another.
func TestSQLExpandsEachStatementOnce(t *testing.T) {
	t.Parallel()
	a, b := MustNew("alpha"), MustNew("beta")
	stmt := `SELECT count(*) FROM {s}.outbox WHERE status = {StatusPending} AND kind = {KindForward} AND {s}.x({SagaDone})`
	want := func(schema string) string {
		return "SELECT count(*) FROM " + schema + ".outbox WHERE status = " + outbox.StatusPending.SQL() +
			" AND kind = " + outbox.KindSQL(outbox.KindForward) + " AND " + schema + ".x(" + outbox.SagaDone.SQL() + ")"
	}
	for range 3 {
		if got := a.sql(stmt); got != want("alpha") {
			t.Fatalf("alpha: sql = %q, want %q", got, want("alpha"))
		}
		if got := b.sql(stmt); got != want("beta") {
			t.Fatalf("beta: sql = %q, want %q", got, want("beta"))
		}
	}
	if got := a.sql("SELECT 1"); got != "SELECT 1" {
		t.Errorf("a statement without placeholders became %q", got)
	}
	if n := a.cached.Load(); n != 2 {
		t.Errorf("alpha keeps %d statements, want 2", n)
	}
	if n := b.cached.Load(); n != 1 {
		t.Errorf("beta keeps %d statements, want 1", n)
	}
	if text, ok := a.expanded.Load(stmt); !ok || text.(string) != want("alpha") {
		t.Errorf("alpha keeps %v (%v) for the statement, want %q", text, ok, want("alpha"))
	}
}

// TestSQLKeepsAtMostMaxExpanded: past maxExpanded distinct statements sql
// still expands each one, without keeping it.
func TestSQLKeepsAtMostMaxExpanded(t *testing.T) {
	t.Parallel()
	s := MustNew("gamma")
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range maxExpanded/2 + 10 {
				stmt := fmt.Sprintf("SELECT %d, %d FROM {s}.queue WHERE status = {StatusFailed}", w, i)
				want := strings.NewReplacer("{s}", "gamma", "{StatusFailed}", outbox.StatusFailed.SQL()).Replace(stmt)
				if got := s.sql(stmt); got != want {
					t.Errorf("sql = %q, want %q", got, want)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := s.cached.Load(); n != maxExpanded {
		t.Errorf("keeps %d statements, want %d", n, maxExpanded)
	}
}
