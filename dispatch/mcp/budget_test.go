package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/idemkey"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// pausingWriter writes the first pauseAfter bytes of an answer, flushes
// them, and writes the rest once release is closed.
type pausingWriter struct {
	http.ResponseWriter
	written int
	release chan struct{}
}

const pauseAfter = 300 << 10

func (w *pausingWriter) Write(p []byte) (int, error) {
	if w.written < pauseAfter && w.written+len(p) > pauseAfter {
		head := pauseAfter - w.written
		n, err := w.ResponseWriter.Write(p[:head])
		w.written += n
		if err != nil {
			return n, err
		}
		w.ResponseWriter.(http.Flusher).Flush()
		<-w.release
		m, err := w.ResponseWriter.Write(p[head:])
		w.written += m
		return n + m, err
	}
	n, err := w.ResponseWriter.Write(p)
	w.written += n
	return n, err
}

// TestLargeAnswersAreReadWithinTheBudget: with a budget of one answer of
// its message limit, an adapter reads one answer past largeAnswer at a
// time. The first call's answer stops halfway (its server holds the rest)
// and keeps the slot; a second call, whose answer is all there, waits for
// the slot rather than read it beside the first; once the first answer
// ends, both calls succeed with their whole answers, and no slot stays
// taken.
func TestLargeAnswersAreReadWithinTheBudget(t *testing.T) {
	big := strings.Repeat("x", 600<<10)
	server := sdk.NewServer(&sdk.Implementation{Name: "big", Version: "1"}, nil)
	server.AddTool(&sdk.Tool{Name: "big", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: big}}}, nil
		})
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return server },
		&sdk.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	release := make(chan struct{})
	var once bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte(`"slow":true`)) {
			w = &pausingWriter{ResponseWriter: w, release: release}
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	defer func() {
		if !once {
			close(release)
		}
	}()
	a, err := New(Config{URL: srv.URL, Timeout: time.Minute, MessageLimit: 1 << 20, AnswerBudget: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	msg := func(step, args string) *dispatch.Message {
		tuple := idemkey.Tuple{AgentRunID: "run", StepID: step, ToolName: "big"}
		return &dispatch.Message{Key: tuple.Key(), Tuple: tuple, Payload: []byte(args), Attempt: 1}
	}
	results := make(chan dispatch.Result, 2)
	go func() { results <- a.Dispatch(context.Background(), msg("s1", `{"slow":true}`)) }()
	waitUntil(t, "the first answer holds the slot", func() bool { return len(a.large) == 1 })
	go func() { results <- a.Dispatch(context.Background(), msg("s2", `{"slow":false}`)) }()
	waitUntil(t, "the second answer waits for the slot", func() bool { return a.largeWaiting.Load() == 1 })
	select {
	case r := <-results:
		t.Fatalf("a call ended while the first answer held the only slot: %+v", r)
	default:
	}
	close(release)
	once = true
	for range 2 {
		select {
		case r := <-results:
			if r.Outcome != dispatch.Success || !bytes.Contains(r.Record, []byte(big)) {
				t.Fatalf("a call: outcome %v, err %v, record of %d bytes; want success with the whole answer", r.Outcome, r.Err, len(r.Record))
			}
		case <-time.After(time.Minute):
			t.Fatal("the calls did not end once the first answer was whole")
		}
	}
	if len(a.large) != 0 || a.largeWaiting.Load() != 0 {
		t.Fatalf("after both calls: %d slots taken, %d waiting; want none", len(a.large), a.largeWaiting.Load())
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAnswerOverTheLimitParks: a tool whose answer is larger than the
// adapter reads of one (its message limit), as a JSON body or as an SSE
// event, ran once, and what it answered is unknown: the attempt is
// Ambiguous and Unread, so its row parks (the engine's decide), never a
// Terminal failure that would say nothing happened.
func TestAnswerOverTheLimitParks(t *testing.T) {
	big := strings.Repeat("x", 2<<20)
	for _, jsonBody := range []bool{true, false} {
		var calls int
		server := sdk.NewServer(&sdk.Implementation{Name: "big", Version: "1"}, nil)
		server.AddTool(&sdk.Tool{Name: "big", InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
				calls++
				return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: big}}}, nil
			})
		srv := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return server },
			&sdk.StreamableHTTPOptions{Stateless: true, JSONResponse: jsonBody}))
		a, err := New(Config{URL: srv.URL, Timeout: time.Minute, MessageLimit: 1 << 20, AnswerBudget: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		tuple := idemkey.Tuple{AgentRunID: "run", StepID: "s", ToolName: "big"}
		r := a.Dispatch(context.Background(), &dispatch.Message{Key: tuple.Key(), Tuple: tuple, Payload: []byte(`{}`), Attempt: 1})
		a.Close(context.Background())
		srv.Close()
		if r.Outcome != dispatch.Ambiguous || !r.Unread || r.NotSent || r.Reason != ReasonTooLarge || calls != 1 {
			t.Fatalf("JSON body %v: outcome %v, unread %v, not sent %v, reason %q, %d calls (%v); want ambiguous, unread, sent, %q, once",
				jsonBody, r.Outcome, r.Unread, r.NotSent, r.Reason, calls, r.Err, ReasonTooLarge)
		}
	}
}
