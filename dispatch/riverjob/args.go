package riverjob

import (
	"bytes"
	"encoding/json"
	"math/big"
	"reflect"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/drainer-io/drainer/dispatch"
)

// jobArgs are the args of an inserted job. Only Key is marked unique: the
// row key alone decides whether a job already exists (the payload, which
// River would otherwise hash too, is compared separately to tell a replay
// from a payload mismatch).
type jobArgs struct {
	// kind is the configured job kind. River asks the args value for its
	// kind on insert, so an unexported field lets one type serve every
	// adapter instance; River's JSON encoding does not see it.
	kind string

	Key           string          `json:"key" river:"unique"`
	AgentRunID    string          `json:"agent_run_id"`
	StepID        string          `json:"step_id"`
	ToolName      string          `json:"tool_name"`
	BusinessScope string          `json:"business_scope"`
	Payload       json.RawMessage `json:"payload"`
}

var _ river.JobArgs = jobArgs{}

// Kind returns the configured job kind.
func (a jobArgs) Kind() string { return a.kind }

func newJobArgs(kind string, m *dispatch.Message) jobArgs {
	return jobArgs{
		kind:          kind,
		Key:           m.Key,
		AgentRunID:    m.Tuple.AgentRunID,
		StepID:        m.Tuple.StepID,
		ToolName:      m.Tuple.ToolName,
		BusinessScope: m.Tuple.BusinessScope,
		Payload:       m.Payload,
	}
}

// uniqueOpts makes a job unique by its key in every state, so that neither a
// waiting, a running nor a finished job (until River's cleaner deletes it)
// lets a second one in. ExcludeKind keeps a row's job unique even if the
// configured job kind changes between two attempts.
func uniqueOpts() river.UniqueOpts {
	return river.UniqueOpts{ByArgs: true, ExcludeKind: true, ByState: rivertype.JobStates()}
}

// samePayload reports whether the existing job's args carry payload. River
// stores args as jsonb, which reorders keys and drops whitespace, so the
// payloads are compared as JSON values: numbers by exact value, objects
// without regard to key order.
func samePayload(encodedArgs []byte, payload json.RawMessage) bool {
	var stored struct {
		Payload json.RawMessage `json:"payload"`
	}
	if json.Unmarshal(encodedArgs, &stored) != nil {
		return false
	}
	if bytes.Equal(stored.Payload, payload) {
		return true
	}
	a, okA := decodeJSON(stored.Payload)
	b, okB := decodeJSON(payload)
	return okA && okB && equalJSON(a, b)
}

func decodeJSON(b []byte) (any, bool) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return nil, false
	}
	return v, true
}

func equalJSON(a, b any) bool {
	switch a := a.(type) {
	case json.Number:
		b, ok := b.(json.Number)
		if !ok {
			return false
		}
		x, okX := new(big.Rat).SetString(a.String())
		y, okY := new(big.Rat).SetString(b.String())
		return okX && okY && x.Cmp(y) == 0
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, va := range a {
			vb, ok := b[k]
			if !ok || !equalJSON(va, vb) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !equalJSON(a[i], b[i]) {
				return false
			}
		}
		return true
	default: // string, bool, nil
		return reflect.DeepEqual(a, b)
	}
}
