package dispatchtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// memory is an in-process provider and the adapter that reaches it, in one:
// the smallest adapter that passes the suite, run here to check the suite
// itself.
type memory struct {
	mu      sync.Mutex
	effects map[string][]byte
	faults  []Fault
}

var _ Upstream = (*memory)(nil)

func (p *memory) Dispatch(ctx context.Context, m *dispatch.Message) dispatch.Result {
	if err := ctx.Err(); err != nil {
		return dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Reason: dispatch.ReasonCancelled, Err: err}
	}
	p.mu.Lock()
	var fault Fault
	if len(p.faults) > 0 {
		fault, p.faults = p.faults[0], p.faults[1:]
	}
	p.mu.Unlock()
	switch fault {
	case FaultTransient:
		return dispatch.Result{Outcome: dispatch.Retry, Reason: "http_5xx", Err: errors.New("memory: try again")}
	case FaultTerminal:
		return dispatch.Result{Outcome: dispatch.Terminal, Reason: "http_4xx", Err: errors.New("memory: refused")}
	case FaultHang:
		<-ctx.Done()
		return dispatch.Result{Outcome: dispatch.Ambiguous, Reason: dispatch.ReasonTimeout, Err: ctx.Err()}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if prev, ok := p.effects[m.Key]; ok {
		if !bytes.Equal(prev, m.Payload) {
			return dispatch.Result{Outcome: dispatch.Terminal, Reason: dispatch.ReasonPayloadMismatch, Err: errors.New("memory: payload mismatch")}
		}
		return dispatch.Result{Outcome: dispatch.Replay, Reason: dispatch.ReasonReplay, Response: json.RawMessage(`{"ok":true}`)}
	}
	p.effects[m.Key] = bytes.Clone(m.Payload)
	return dispatch.Result{Outcome: dispatch.Success, Reason: dispatch.ReasonHTTP2xx, Response: json.RawMessage(`{"ok":true}`)}
}

func (p *memory) Effects(_ *testing.T, key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.effects[key]; ok {
		return 1
	}
	return 0
}

func (p *memory) Inject(f Fault, n int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for range n {
		p.faults = append(p.faults, f)
	}
	return true
}

func TestRunMemory(t *testing.T) {
	Run(t, func(t *testing.T) (dispatch.Adapter, Upstream, string) {
		p := &memory{effects: map[string][]byte{}}
		return p, p, "memory-secret"
	})
}

func TestNewMessage(t *testing.T) {
	a, b := NewMessage("charge_card", `{"x":1}`), NewMessage("charge_card", `{"x":1}`)
	for _, m := range []*dispatch.Message{a, b} {
		if err := m.Tuple.Validate(); err != nil {
			t.Errorf("invalid tuple: %v", err)
		}
		if m.Key != m.Tuple.Key() || m.Attempt != 1 || m.Kind != outbox.KindForward || string(m.Payload) != `{"x":1}` {
			t.Errorf("message: %+v", m)
		}
	}
	if a.Key == b.Key || a.Seq == b.Seq {
		t.Errorf("two messages share key %s or seq %d", a.Key, a.Seq)
	}
	if !strings.HasPrefix(a.Tuple.AgentRunID, "dispatchtest-") {
		t.Errorf("agent_run_id %q", a.Tuple.AgentRunID)
	}
	defer func() {
		if recover() == nil {
			t.Error("NewMessage with an empty tool did not panic")
		}
	}()
	NewMessage("", "{}")
}

func TestFaultString(t *testing.T) {
	for f, want := range map[Fault]string{FaultTransient: "transient", FaultTerminal: "terminal", FaultHang: "hang", 0: "fault(invalid)"} {
		if got := f.String(); got != want {
			t.Errorf("Fault(%d).String() = %q, want %q", f, got, want)
		}
	}
}
