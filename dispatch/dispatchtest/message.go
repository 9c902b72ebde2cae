package dispatchtest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"sync/atomic"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/outbox"
)

// Tool is the tool_name of the messages Run dispatches. Adapters that map
// tool names to provider endpoints must accept it in their test config.
const Tool = "dispatchtest_effect"

// marker is carried by every payload Run dispatches and must never appear in
// an error.
const marker = "dispatchtest-payload-marker-5f1c"

// payload is the body of Run's messages: a flat JSON object that a form
// encoder, a jsonb column and a message broker all accept.
const payload = `{"amount":1250,"currency":"eur","description":"` + marker + `"}`

// runID tells this test binary's keys apart from those of earlier runs, for
// upstreams that outlive a test run (a NATS stream's duplicate window, a
// shared database).
var runID = func() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand docs)
	return hex.EncodeToString(b[:])
}()

var seq atomic.Int64

// NewMessage returns a first attempt (Attempt 1) of a new forward row whose
// tuple is valid and unique to this call, with Key = Tuple.Key(). It panics
// if tool is not a valid tool_name (idemkey.Tuple.Validate).
func NewMessage(tool string, payload string) *dispatch.Message {
	n := seq.Add(1)
	tuple := idemkey.Tuple{
		AgentRunID:    "dispatchtest-" + runID,
		StepID:        "step-" + strconv.FormatInt(n, 10),
		ToolName:      tool,
		BusinessScope: "dispatchtest",
	}
	if err := tuple.Validate(); err != nil {
		panic("dispatchtest.NewMessage: " + err.Error())
	}
	return &dispatch.Message{
		Key:     tuple.Key(),
		Tuple:   tuple,
		Kind:    outbox.KindForward,
		Payload: json.RawMessage(payload),
		Attempt: 1,
		Seq:     n,
	}
}

// attempt returns a copy of m as its n-th attempt.
func attempt(m *dispatch.Message, n int) *dispatch.Message {
	c := *m
	c.Attempt = n
	return &c
}
