//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/tooling/testkit"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"pgregory.net/rapid"
)

// The MCP gateway in the model-checked test (docs/reliability.md): every
// replica serves the gateway (docs/reference.md §13) in front of an MCP
// tool server whose tool gwTool counts its effects per idempotency key.
// The actions make agent calls through a random live replica, new ones
// and re-sends of earlier ones under new request ids (the harness
// retrying), while the other actions kill and stop replicas, restart
// Postgres and kill the daemons' connections (the gateway's listener
// among them). Invariants, once the sequence settled:
//   - every call's row settles (none left pending or in_flight);
//   - the tool had its effect at most once per call, and exactly once for
//     a call whose row succeeded;
//   - every answer about a call that claims the tool's result (not
//     isError) is the same, byte for byte; a result more than a record
//     keeps is answered whole only to a call that waited for it, and
//     every other answer about it says so, naming its size and carrying
//     its structured result (checkTooLarge); a final re-send through
//     each live replica gets it again, marked as a replay, with no new
//     request to the tool (once retention pruned the row: an answer saying
//     so, and no request; once its tombstone expired too: a new row, sent
//     with the same key, whose answer is the tool's same result);
//   - the gateway's wake-up is not deaf: a probe call is answered because
//     its row's settle notification reached the gateway, not by its
//     periodic read (drainer_gateway_settled_reads_total{cause}).

// gwHeardWithin bounds the time from a probe call's answer to its row's
// settle notification at the replica's listener (the notification is sent
// at the completion's commit, before the answer).
const gwHeardWithin = 10 * time.Second

// gwTool is the tool the gateway serves in the model.
const gwTool = "gw_charge"

// gwServer is the model's MCP tool server.
type gwServer struct {
	url string

	mu       sync.Mutex
	effects  map[string]int // per key
	requests map[string]int // per key
	answers  map[string]string
}

func newGWServer(t *testing.T) *gwServer {
	s := &gwServer{effects: map[string]int{}, requests: map[string]int{}, answers: map[string]string{}}
	server := sdk.NewServer(&sdk.Implementation{Name: "model-tools", Version: "1"}, nil)
	yes := true
	server.AddTool(&sdk.Tool{Name: gwTool, InputSchema: json.RawMessage(`{"type":"object"}`),
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &yes}},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			key, _ := req.Params.Meta[mcpMetaKey].(string)
			var args struct {
				Pad int `json:"pad"`
			}
			_ = json.Unmarshal(req.Params.Arguments, &args)
			time.Sleep(20 * time.Millisecond) // long enough for a kill to land mid-call now and then
			s.mu.Lock()
			defer s.mu.Unlock()
			s.requests[key]++
			text, seen := s.answers[key]
			if !seen {
				s.effects[key]++
				text = fmt.Sprintf("charged %s as effect #%d", key, len(s.answers)+1) + strings.Repeat(".", args.Pad)
				s.answers[key] = text
			}
			res := &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}},
				StructuredContent: json.RawMessage(`{"key":"` + key + `","ok":true}`)}
			if seen {
				res.Meta = sdk.Meta{"io.drainer/replay": true}
			}
			return res, nil
		})
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return server },
		&sdk.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

func (s *gwServer) counts(key string) (effects, requests int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.effects[key], s.requests[key]
}

// gwPads are the sizes a call's result is padded by, drawn for each new
// call: most results are small; one of 96 KiB is answered within the
// budget of large answers; one of 1.1 MiB is more than a record keeps
// (answered whole only to the call that waited for it in the replica that
// sent it, its record keeping its size).
var gwPads = []int{0, 0, 0, 0, 96 << 10, 1100 << 10}

// gwRecordLimit is what a record keeps of a result (the mcp adapter's
// default record limit, docs/reference.md §13).
const gwRecordLimit = 1 << 20

// gwCall is one agent call the sequence made (and may make again).
type gwCall struct {
	run  string
	args map[string]any
	key  string // from the first answer that names it
	// answers: the bodies of the answers that gave the tool's result whole.
	answers []string
	// tooLarge: the answers that said the result was too large to keep
	// (_meta["io.drainer/too_large"]): the size each named, and its body.
	tooLarge []gwTooLarge
	other    []string // other answers (timeouts, errors), for failure messages
}

// gwTooLarge is an answer about a result too large to record.
type gwTooLarge struct {
	size float64
	body string
}

// gwCallOnce calls gwTool through the gateway at url as the agent of run,
// from a new client session (a new request id). It returns the answer's
// body (content and structuredContent as JSON), its _meta and whether it
// was an error; err when no answer came.
func gwCallOnce(url, run string, args map[string]any, timeout time.Duration) (body string, meta sdk.Meta, isError bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	hc := &http.Client{Transport: testkit.Headers{Set: map[string]string{"X-Agent-Run-Id": run}}}
	c := sdk.NewClient(&sdk.Implementation{Name: "model-agent", Version: "1"}, nil)
	s, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: -1}, nil)
	if err != nil {
		return "", nil, false, err
	}
	defer s.Close()
	res, err := s.CallTool(ctx, &sdk.CallToolParams{Name: gwTool, Arguments: args})
	if err != nil {
		return "", nil, false, err
	}
	b, err := json.Marshal(struct {
		Content           []sdk.Content `json:"content"`
		StructuredContent any           `json:"structuredContent,omitempty"`
		IsError           bool          `json:"isError,omitempty"`
	}{res.Content, res.StructuredContent, res.IsError})
	if err != nil {
		return "", nil, false, err
	}
	return string(b), res.Meta, res.IsError, nil
}

// gatewayURL is a live, running (not stopped) replica's gateway, drawn at
// random; "" when every replica is stopped.
func (m *seqModel) gatewayURL(rt *rapid.T) string {
	var live []*modelReplica
	for _, r := range m.e.replicas {
		if r.stopped.IsZero() && !r.d.exited() {
			live = append(live, r)
		}
	}
	if len(live) == 0 {
		return ""
	}
	r := live[rapid.IntRange(0, len(live)-1).Draw(rt, "gateway")]
	return m.e.gateways[r.d.name]
}

// actGateway makes one agent call through a gateway: a new call, or a
// re-send of one made before (the harness retrying under a new request id).
func (m *seqModel) actGateway(rt *rapid.T) bool {
	url := m.gatewayURL(rt)
	if url == "" {
		return false
	}
	var c *gwCall
	if len(m.gwCalls) > 0 && rapid.Bool().Draw(rt, "resend") {
		c = m.gwCalls[rapid.IntRange(0, len(m.gwCalls)-1).Draw(rt, "call")]
	} else {
		n := len(m.gwCalls)
		c = &gwCall{run: "g" + m.prefix + strconv.Itoa(n%3), args: map[string]any{"amount": n, "card": "c" + strconv.Itoa(n)}}
		if pad := rapid.SampledFrom(gwPads).Draw(rt, "pad"); pad > 0 {
			c.args["pad"] = pad
			m.tally["gateway calls with large results"]++
		}
		m.gwCalls = append(m.gwCalls, c)
	}
	body, meta, isError, err := gwCallOnce(url, c.run, c.args, 8*time.Second)
	m.noteGW(c, body, meta, isError, err)
	m.tally["gateway calls"]++
	return true
}

// noteGW records an answer about c.
func (m *seqModel) noteGW(c *gwCall, body string, meta sdk.Meta, isError bool, err error) {
	switch {
	case err != nil:
		c.other = append(c.other, "no answer: "+err.Error())
	case isError:
		c.other = append(c.other, fmt.Sprintf("isError %v: %.200s", meta["io.drainer/status"], body))
	case meta["io.drainer/too_large"] != nil && len(body) <= gwRecordLimit:
		// (the answer that gives such a result whole carries its size too)
		size, _ := meta["io.drainer/too_large"].(float64)
		c.tooLarge = append(c.tooLarge, gwTooLarge{size: size, body: body})
	default:
		c.answers = append(c.answers, body)
	}
	if k, ok := meta["io.drainer/key"].(string); ok && c.key == "" {
		c.key = k
	}
}

// settleGateway waits until every row of the sequence's gateway calls is
// terminal or parked.
func (m *seqModel) settleGateway() {
	if len(m.gwCalls) == 0 {
		return
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var open int
		if err := withRetry(func(ctx context.Context) error {
			return m.e.pool.QueryRow(ctx, `SELECT count(*) FROM drainer.outbox WHERE agent_run_id LIKE $1 AND status IN ('pending', 'in_flight')`,
				"g"+m.prefix+"%").Scan(&open)
		}); err != nil {
			m.rt.Fatalf("settle the gateway's rows: %v", err)
		}
		if open == 0 {
			return
		}
		if time.Now().After(deadline) {
			m.rt.Fatalf("stuck: %d rows of gateway calls pending or in_flight 3 minutes after the sequence", open)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkGateway checks the gateway's invariants (see the top of this file).
func (m *seqModel) checkGateway(fail func(string, ...any)) {
	e := m.e
	if e.without["gateway"] {
		return
	}
	for i, c := range m.gwCalls {
		name := fmt.Sprintf("gateway call %d (run %s, args %v)", i, c.run, c.args)
		// A final re-send through every live replica.
		for _, r := range e.replicas {
			if r.d.exited() || !r.stopped.IsZero() {
				continue
			}
			m.finalResend(c, name, r, fail)
		}
		for _, a := range c.answers {
			if a != c.answers[0] {
				fail("%s: answers differ (%d and %d bytes):\n    %.300s\n    %.300s", name, len(c.answers[0]), len(a), c.answers[0], a)
				break
			}
		}
		if c.key == "" {
			continue
		}
		m.checkTooLarge(c, name, fail)
		effects, requests := e.gwServer.counts(c.key)
		status, _ := m.gwRow(c.key)
		if effects > 1 || (status == "succeeded" && effects != 1) {
			fail("%s: %d effects at the tool (%d requests) for key %s, row %q", name, effects, requests, c.key, status)
		}
		if len(c.answers) > 0 && !strings.Contains(c.answers[0], c.key) {
			fail("%s: answered with another call's result: %.300s", name, c.answers[0])
		}
	}
	m.checkGatewayWakeUp(fail)
}

// checkTooLarge: a result is answered as too large to keep exactly when
// it is more than a record keeps, and such an answer names a size past the
// limit and carries the call's own structured result (its key); a result
// within the limit, however large, is answered whole.
func (m *seqModel) checkTooLarge(c *gwCall, name string, fail func(string, ...any)) {
	pad, _ := c.args["pad"].(int)
	large := pad > gwRecordLimit
	for _, a := range c.answers {
		if large && len(a) < pad {
			fail("%s: a result of more than %d bytes answered whole in %d bytes: %.300s", name, pad, len(a), a)
			return
		}
	}
	for _, t := range c.tooLarge {
		switch {
		case !large:
			fail("%s: a result of %d bytes' padding (within a record's %d) answered as too large to keep (%v bytes): %.300s",
				name, pad, gwRecordLimit, t.size, t.body)
		case t.size <= gwRecordLimit:
			fail("%s: answered as too large to keep, naming %v bytes, within a record's %d: %.300s", name, t.size, gwRecordLimit, t.body)
		case !strings.Contains(t.body, `"structuredContent":{"key":"`+c.key+`"`):
			fail("%s: an answer about a result too large to keep without the call's structured result: %.300s", name, t.body)
		default:
			continue
		}
		return
	}
}

// finalResend sends c once more through r's gateway. While its row exists
// the answer is the recorded result, marked a replay, and the tool hears
// nothing. Once retention pruned the row, the answer says so and the tool
// hears nothing; once its tombstone expired too, the call is a new row
// (docs/reference.md §2), sent with the same key, which the tool answers
// from its own record: the same result, no second effect.
func (m *seqModel) finalResend(c *gwCall, name string, r *modelReplica, fail func(string, ...any)) {
	e := m.e
	var before int
	if c.key != "" {
		_, before = e.gwServer.counts(c.key)
	}
	_, existed := m.gwRow(c.key)
	body, meta, isError, err := gwCallOnce(e.gateways[r.d.name], c.run, c.args, time.Minute)
	if err != nil {
		fail("%s: the final re-send through %s: %v (earlier: %v)", name, r.d.name, err, c.other)
		return
	}
	if c.key == "" {
		c.key, _ = meta["io.drainer/key"].(string)
		_, before = e.gwServer.counts(c.key)
	}
	_, after := e.gwServer.counts(c.key)
	_, exists := m.gwRow(c.key)
	switch {
	case isError && strings.Contains(body, "has been pruned"):
		if exists {
			fail("%s: the final re-send through %s was told the call was pruned, but its row exists", name, r.d.name)
		}
		if after != before {
			fail("%s: the final re-send through %s was told the call was pruned, yet reached the tool", name, r.d.name)
		}
	case isError && m.gwKeyWindowPassed(c.key):
		// its row failed unsent once its key's window had passed (the
		// replicas that could send it were down for longer): every
		// answer about it says so, and the tool heard nothing more
		if after != before {
			fail("%s: the final re-send through %s was told the call failed, yet reached the tool", name, r.d.name)
		}
	case isError:
		fail("%s: the final re-send through %s: isError: %.300s (earlier: %v)", name, r.d.name, body, c.other)
	case meta["io.drainer/replay"] == true:
		m.noteGW(c, body, meta, isError, err)
		if after != before {
			fail("%s: the final re-send through %s was answered as a replay, yet reached the tool (%d requests before, %d after)", name, r.d.name, before, after)
		}
	default:
		m.noteGW(c, body, meta, isError, err)
		if existed {
			fail("%s: the final re-send through %s created a new row although the call's row existed", name, r.d.name)
		}
	}
}

// gwRow returns the status of key's row and whether it exists.
func (m *seqModel) gwRow(key string) (string, bool) {
	if key == "" {
		return "", false
	}
	var status string
	var n int
	if err := withRetry(func(ctx context.Context) error {
		return m.e.pool.QueryRow(ctx, `SELECT coalesce(max(status), ''), count(*) FROM drainer.outbox WHERE key = $1`, key).Scan(&status, &n)
	}); err != nil {
		m.rt.Fatalf("read the row of %s: %v", key, err)
	}
	return status, n > 0
}

// gwKeyWindowPassed reports whether the row of key failed by the key TTL
// guard: not sent again once key_ttl − 1m had passed since its first
// attempt (docs/reference.md §4).
func (m *seqModel) gwKeyWindowPassed(key string) bool {
	var failed bool
	if err := withRetry(func(ctx context.Context) error {
		return m.e.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM drainer.outbox WHERE key = $1 AND status = 'failed'
		                                                  AND last_error LIKE 'key TTL guard:%')`, key).Scan(&failed)
	}); err != nil {
		m.rt.Fatalf("read the row of %s: %v", key, err)
	}
	return failed
}

// checkGatewayWakeUp: once the sequence settled, a call through each live
// replica's gateway learns that its row settled from the notification (or
// its own engine's news), not from its periodic read, whatever the sequence
// did to the connections; and the replica's settle listener hears the
// notification of that call's row within gwHeardWithin
// (drainer_gateway_settle_notifications_total): a call answered from its
// own engine's news needs no listener, but a call joined to a row another
// replica sends has nothing else. A read can race a healthy notification
// now and then, so up to three probes are made per replica: a deaf
// listener loses every one.
func (m *seqModel) checkGatewayWakeUp(fail func(string, ...any)) {
	e := m.e
	for _, r := range e.replicas {
		if r.d.exited() || !r.stopped.IsZero() {
			continue
		}
		var seen []string
		ok := false
		for try := range 3 {
			notify := m.metric(r.d, "drainer_gateway_settled_reads_total", `cause="notify"`)
			recheck := m.metric(r.d, "drainer_gateway_settled_reads_total", `cause="recheck"`)
			heard := m.metric(r.d, "drainer_gateway_settle_notifications_total")
			run := fmt.Sprintf("gwake-%d-%s-%d", e.seq, r.d.name, try)
			_, _, isError, err := gwCallOnce(e.gateways[r.d.name], run, map[string]any{"probe": try}, time.Minute)
			if err != nil || isError {
				seen = append(seen, fmt.Sprintf("probe %d: err %v, isError %v", try+1, err, isError))
				continue
			}
			dn := m.metric(r.d, "drainer_gateway_settled_reads_total", `cause="notify"`) - notify
			dr := m.metric(r.d, "drainer_gateway_settled_reads_total", `cause="recheck"`) - recheck
			dh := 0.0
			for deadline := time.Now().Add(gwHeardWithin); dh == 0 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				dh = m.metric(r.d, "drainer_gateway_settle_notifications_total") - heard
			}
			if dn >= 1 && dr == 0 && dh >= 1 {
				ok = true
				break
			}
			seen = append(seen, fmt.Sprintf("probe %d: %v reads on a notification, %v by the periodic read, %v notifications heard within %s",
				try+1, dn, dr, dh, gwHeardWithin))
		}
		if !ok {
			fail("gateway of %s deaf after the sequence: %s", r.d.name, strings.Join(seen, "; "))
		}
	}
}
