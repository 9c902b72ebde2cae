package riverjob

import (
	"encoding/json"
	"testing"
)

func TestSamePayload(t *testing.T) {
	const stored = `{"key": "k", "payload": {"a": 1, "b": [1.50, "x", null, true], "c": {"d": 10000000000000000000001}}}`
	tests := []struct {
		payload string
		want    bool
	}{
		{`{"a": 1, "b": [1.50, "x", null, true], "c": {"d": 10000000000000000000001}}`, true},
		{`{"c":{"d":1.0000000000000000000001e22},"b":[1.5,"x",null,true],"a":1.0}`, true},
		{`{"a": 1, "b": [1.50, "x", null, true], "c": {"d": 10000000000000000000002}}`, false},
		{`{"a": 1, "b": ["x", 1.50, null, true], "c": {"d": 10000000000000000000001}}`, false},
		{`{"a": 1, "b": [1.50, "x", null, true]}`, false},
		{`{"a": "1", "b": [1.50, "x", null, true], "c": {"d": 10000000000000000000001}}`, false},
		{`{"a": 1, "b": [1.50, "x", null, false], "c": {"d": 10000000000000000000001}}`, false},
		{`[]`, false},
		{`{`, false},
	}
	for _, tt := range tests {
		if got := samePayload([]byte(stored), json.RawMessage(tt.payload)); got != tt.want {
			t.Errorf("samePayload(%s) = %v, want %v", tt.payload, got, tt.want)
		}
	}
	if samePayload([]byte(`not json`), json.RawMessage(`{}`)) {
		t.Error("unreadable stored args compare equal")
	}
}

func TestJobArgsEncoding(t *testing.T) {
	b, err := json.Marshal(jobArgs{kind: "k", Key: "idem", AgentRunID: "r", StepID: "s", ToolName: "t", Payload: json.RawMessage(`{"x":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"key":"idem","agent_run_id":"r","step_id":"s","tool_name":"t","business_scope":"","payload":{"x":1}}`
	if string(b) != want {
		t.Errorf("args = %s, want %s", b, want)
	}
	if (jobArgs{kind: "custom"}).Kind() != "custom" {
		t.Error("Kind does not return the configured kind")
	}
}
