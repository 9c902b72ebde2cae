package store

import (
	"encoding/json"
	"testing"
)

// PlanWork is what a plan did, machine-independent: the rows every node
// of it returned, each node's rows times its loops, summed over the plan
// (subplans included), from EXPLAIN (ANALYZE, FORMAT JSON).
func PlanWork(t testing.TB, plan []byte) (work float64) {
	t.Helper()
	var doc []struct {
		Plan json.RawMessage `json:"Plan"`
	}
	if err := json.Unmarshal(plan, &doc); err != nil || len(doc) != 1 {
		t.Fatalf("EXPLAIN output: %v: %.200s", err, plan)
	}
	var walk func(raw json.RawMessage)
	walk = func(raw json.RawMessage) {
		var n struct {
			Rows  float64           `json:"Actual Rows"`
			Loops float64           `json:"Actual Loops"`
			Plans []json.RawMessage `json:"Plans"`
		}
		if err := json.Unmarshal(raw, &n); err != nil {
			t.Fatalf("EXPLAIN node: %v", err)
		}
		work += n.Rows * n.Loops
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(doc[0].Plan)
	return work
}
