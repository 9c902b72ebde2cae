package riverjob

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/dispatchtest"
	"github.com/drainer-io/drainer/idemkey"
)

// payloadSecret must never appear in an error.
const payloadSecret = "payload-s3cr3t-77e1"

const testPayload = `{"amount": 1250, "currency": "eur", "note": "` + payloadSecret + `", "items": [1, 2.50]}`

func testMessage() *dispatch.Message {
	return dispatchtest.NewMessage("charge_card", testPayload)
}

func dispatchOK(t *testing.T, a *Adapter, m *dispatch.Message, want dispatch.Outcome) jobRef {
	t.Helper()
	r := a.Dispatch(t.Context(), m)
	if r.Outcome != want || r.Err != nil {
		t.Fatalf("Dispatch = %s (reason %q, err %v), want %s", r.Outcome, r.Reason, r.Err, want)
	}
	var ref jobRef
	if err := json.Unmarshal(r.Response, &ref); err != nil || ref.JobID == 0 {
		t.Fatalf("response %s: %v", r.Response, err)
	}
	return ref
}

type jobRef struct {
	JobID int64  `json:"job_id"`
	Queue string `json:"queue"`
	Kind  string `json:"kind"`
}

// assertRedacted fails if r.Err reveals the payload or the DSN's password.
func assertRedacted(t *testing.T, r dispatch.Result, secret string) {
	t.Helper()
	if r.Err == nil {
		return
	}
	if msg := r.Err.Error(); strings.Contains(msg, payloadSecret) || strings.Contains(msg, secret) {
		t.Errorf("Err reveals the payload or the password: %s", msg)
	}
}

func TestDispatchInsertsJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testSchema)
	a := e.adapter(t, func(c *Config) { c.Queue = "agent_intents"; c.JobKind = "agent.intent" })
	m := testMessage()
	m.Tuple.BusinessScope = "" // may be empty
	m.Key = m.Tuple.Key()

	ref := dispatchOK(t, a, m, dispatch.Success)
	if ref.Queue != "agent_intents" || ref.Kind != "agent.intent" {
		t.Errorf("response %+v, want the configured queue and kind", ref)
	}
	var (
		kind, queue, state string
		args               map[string]json.RawMessage
	)
	err := e.admin.QueryRow(t.Context(), "SELECT kind, queue, state::text, args FROM river.river_job WHERE id = $1", ref.JobID).
		Scan(&kind, &queue, &state, &args)
	if err != nil {
		t.Fatal(err)
	}
	if kind != "agent.intent" || queue != "agent_intents" || state != "available" {
		t.Errorf("job kind %q, queue %q, state %q", kind, queue, state)
	}
	want := map[string]string{
		"key": `"` + m.Key + `"`, "agent_run_id": `"` + m.Tuple.AgentRunID + `"`, "step_id": `"` + m.Tuple.StepID + `"`,
		"tool_name": `"charge_card"`, "business_scope": `""`,
	}
	for k, v := range want {
		if string(args[k]) != v {
			t.Errorf("args.%s = %s, want %s", k, args[k], v)
		}
	}
	if len(args) != 6 || !samePayload(mustJSON(t, args), m.Payload) {
		t.Errorf("args = %v, want the six fields with the payload as JSON", args)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDuplicateDispatchIsReplay(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testSchema)
	a, other := e.adapter(t, nil), e.adapter(t, func(c *Config) { c.JobKind = "renamed_kind"; c.Queue = "elsewhere" })
	m := testMessage()
	first := dispatchOK(t, a, m, dispatch.Success)
	again := dispatchOK(t, a, m, dispatch.Replay)
	// Another replica, or a config whose kind and queue changed meanwhile.
	renamed := dispatchOK(t, other, m, dispatch.Replay)
	if again != first || renamed != first {
		t.Errorf("replays answered %+v and %+v, want the first job %+v", again, renamed, first)
	}
	if n := e.jobs(t, m.Key); n != 1 {
		t.Errorf("%d jobs hold the key, want 1", n)
	}
}

func TestConcurrentDuplicatesInsertOneJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testSchema)
	a := e.adapter(t, nil)
	m := testMessage()
	results := make([]dispatch.Result, 8)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() { results[i] = a.Dispatch(t.Context(), m) })
	}
	wg.Wait()
	success := 0
	for _, r := range results {
		switch r.Outcome {
		case dispatch.Success:
			success++
		case dispatch.Replay:
		default:
			t.Errorf("concurrent duplicate: %s (reason %q, err %v)", r.Outcome, r.Reason, r.Err)
		}
	}
	if success != 1 || e.jobs(t, m.Key) != 1 {
		t.Errorf("%d successes, %d jobs; want 1 and 1", success, e.jobs(t, m.Key))
	}
}

// workedArgs is what a River worker elsewhere would declare for the
// drainer's jobs.
type workedArgs struct {
	Key           string          `json:"key"`
	AgentRunID    string          `json:"agent_run_id"`
	StepID        string          `json:"step_id"`
	ToolName      string          `json:"tool_name"`
	BusinessScope string          `json:"business_scope"`
	Payload       json.RawMessage `json:"payload"`
}

func (workedArgs) Kind() string { return DefaultJobKind }

// TestJobRunsOnce works the jobs with a real River client: the job runs
// once, and a dispatch after it completed is still a replay.
func TestJobRunsOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testSchema)
	a := e.adapter(t, nil)

	var (
		mu   sync.Mutex
		runs = map[string][]workedArgs{}
	)
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(_ context.Context, job *river.Job[workedArgs]) error {
		mu.Lock()
		defer mu.Unlock()
		runs[job.Args.Key] = append(runs[job.Args.Key], job.Args)
		return nil
	}))
	worker := startWorker(t, e.admin, workers)
	completed, cancelSub := worker.Subscribe(river.EventKindJobCompleted)
	defer cancelSub()

	m := testMessage()
	ref := dispatchOK(t, a, m, dispatch.Success)
	select {
	case ev := <-completed:
		if ev.Job.ID != ref.JobID {
			t.Fatalf("job %d completed, want %d", ev.Job.ID, ref.JobID)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the job did not complete within 30s")
	}
	if again := dispatchOK(t, a, m, dispatch.Replay); again != ref {
		t.Errorf("replay after completion answered %+v, want %+v", again, ref)
	}
	var state string
	if err := e.admin.QueryRow(t.Context(), "SELECT state::text FROM river.river_job WHERE id = $1", ref.JobID).Scan(&state); err != nil || state != "completed" {
		t.Errorf("job state %q, %v; want completed", state, err)
	}
	if n := e.jobs(t, m.Key); n != 1 {
		t.Errorf("%d jobs hold the key, want 1", n)
	}
	// Give a wrongly inserted second job a chance to run before counting.
	other := dispatchOK(t, a, testMessage(), dispatch.Success)
	select {
	case ev := <-completed:
		if ev.Job.ID != other.JobID {
			t.Errorf("job %d completed, want %d", ev.Job.ID, other.JobID)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the second job did not complete within 30s")
	}
	mu.Lock()
	defer mu.Unlock()
	got := runs[m.Key]
	if len(got) != 1 {
		t.Fatalf("the job ran %d times, want once", len(got))
	}
	w := got[0]
	if w.AgentRunID != m.Tuple.AgentRunID || w.StepID != m.Tuple.StepID || w.ToolName != "charge_card" ||
		w.BusinessScope != m.Tuple.BusinessScope || !samePayload(mustJSON(t, map[string]any{"payload": w.Payload}), m.Payload) {
		t.Errorf("worker got %+v", w)
	}
	if (idemkey.Tuple{AgentRunID: w.AgentRunID, StepID: w.StepID, ToolName: w.ToolName, BusinessScope: w.BusinessScope}).Key() != w.Key {
		t.Error("the worker cannot recompute the key from the tuple")
	}
}

// startWorker starts a River client that works the default queue of
// testSchema, stopped when t ends.
func startWorker(t *testing.T, pool *pgxpool.Pool, workers *river.Workers) *river.Client[pgx.Tx] {
	t.Helper()
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema:  testSchema,
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}},
		Workers: workers,
		Logger:  slog.New(slog.DiscardHandler),
		// Fetch often: the test waits on completions.
		FetchPollInterval: 50 * time.Millisecond,
		FetchCooldown:     10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := client.Stop(ctx); err != nil {
			t.Errorf("stop worker: %v", err)
		}
	})
	return client
}

func TestPayloadMismatchIsTerminal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testSchema)
	a := e.adapter(t, nil)
	m := testMessage()
	dispatchOK(t, a, m, dispatch.Success)

	// The same payload, re-encoded the way jsonb prints it, is a replay.
	same := *m
	same.Payload = json.RawMessage(`{"note":"` + payloadSecret + `","items":[1,2.5],"amount":1.25e3,"currency":"eur"}`)
	dispatchOK(t, a, &same, dispatch.Replay)

	other := *m
	other.Payload = json.RawMessage(`{"amount": 99, "note": "` + payloadSecret + `"}`)
	r := a.Dispatch(t.Context(), &other)
	assertRedacted(t, r, e.secret)
	if r.Outcome != dispatch.Terminal || r.Reason != dispatch.ReasonPayloadMismatch {
		t.Errorf("another payload: %s (reason %q, err %v), want terminal payload_mismatch", r.Outcome, r.Reason, r.Err)
	}
	if n := e.jobs(t, m.Key); n != 1 {
		t.Errorf("%d jobs hold the key, want 1", n)
	}
}

func TestKeyTTL(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testSchema)
	ttl, err := e.adapter(t, nil).KeyTTL(t.Context())
	if err != nil || ttl != 24*time.Hour {
		t.Errorf("KeyTTL = %v, %v; want River's default retention of completed jobs, 24h", ttl, err)
	}
}
