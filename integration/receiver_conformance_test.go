//go:build integration

package integration

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/internal/conformance/conformancetest"
	"github.com/drainer-io/drainer/receiver"
	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// `drainer conformance` (the binary) against a handler behind the Go
// receiver in both modes, and against deliberately broken endpoints. The
// example services are probed in receiver_examples_test.go, the daemon
// draining into a receiver in receiver_drain_test.go, the load figures in
// receiver_load_test.go.

// conformanceReport is the JSON report of `drainer conformance --output json`.
type conformanceReport struct {
	URL         string `json:"url"`
	Mode        string `json:"mode"`
	Concurrency int    `json:"concurrency"`
	Passed      bool   `json:"passed"`
	Checks      []struct {
		Name   string `json:"name"`
		Passed bool   `json:"passed"`
		Seen   string `json:"seen"`
	} `json:"checks"`
}

// runConformance runs `drainer conformance --output json` against url with
// extra arguments and decodes its report.
func runConformance(t *testing.T, url string, args ...string) (cliResult, conformanceReport) {
	t.Helper()
	res := runCLI(t, nil, append([]string{"conformance", "--url", url, "--output", "json"}, args...)...)
	var rep conformanceReport
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil {
		t.Fatalf("conformance --output json: %v\n%s", err, res)
	}
	return res, rep
}

// requireAllPass fails the test unless every check of rep passed and, when
// observed, the in-flight answer was observed.
func requireAllPass(t *testing.T, res cliResult, rep conformanceReport, observed bool) {
	t.Helper()
	if res.code != 0 || !rep.Passed || len(rep.Checks) != 7 {
		t.Fatalf("conformance: exit %d, passed %v, %d checks\n%s", res.code, rep.Passed, len(rep.Checks), res)
	}
	for _, c := range rep.Checks {
		if !c.Passed {
			t.Errorf("FAIL %s: %s", c.Name, c.Seen)
		}
		if observed && c.Name == "in-flight" && strings.Contains(c.Seen, "not observed") {
			t.Errorf("in-flight: the burst never met the key in flight: %s", c.Seen)
		}
	}
}

// receiverPool returns a pool on a fresh database of its own (the
// service's, not drainer's).
func receiverPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dbtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// service is a receiver-wrapped order service whose handler counts its runs
// per key. It holds the first write of a `drainer conformance` burst until
// the receiver answered another request of that burst 409 in flight, so the
// in-flight answer is always observed (the conformance tuples name their
// check in step_id).
type service struct {
	mu        sync.Mutex
	runs      map[string]int // handler runs per Idempotency-Key
	conflicts map[string]int // 409 answers per key, as they left the receiver
}

func newService() *service {
	return &service{runs: map[string]int{}, conflicts: map[string]int{}}
}

// maxRuns returns the most runs of one key and the number of keys run.
func (s *service) maxRuns() (most, keys int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.runs {
		most = max(most, n)
	}
	return most, len(s.runs)
}

// handler answers 201 with an order id after counting the run.
func (s *service) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		if conformanceStep(r) == "in-flight" {
			s.waitConflict(key)
		}
		s.mu.Lock()
		s.runs[key]++
		n := len(s.runs)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", fmt.Sprintf("/v1/orders/%d", n))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order_id":%d}`, n)
	})
}

// wrap counts the 409 answers per key as they leave h.
func (s *service) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		if sw.status == http.StatusConflict {
			s.mu.Lock()
			s.conflicts[r.Header.Get("Idempotency-Key")]++
			s.mu.Unlock()
		}
	})
}

// waitConflict waits until key got a 409 answer, at most 10s.
func (s *service) waitConflict(key string) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		s.mu.Lock()
		n := s.conflicts[key]
		s.mu.Unlock()
		if n > 0 {
			return
		}
	}
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// conformanceStep returns the step_id of r's X-Agent-Idempotency-Tuple, or "".
func conformanceStep(r *http.Request) string {
	raw, err := base64.RawURLEncoding.DecodeString(r.Header.Get("X-Agent-Idempotency-Tuple"))
	if err != nil {
		return ""
	}
	var tuple struct {
		StepID string `json:"step_id"`
	}
	_ = json.Unmarshal(raw, &tuple)
	return tuple.StepID
}

// TestConformanceGoReceiver: `drainer conformance` passes every check
// against a handler behind the Go receiver, in seed and ietf mode, and the
// handler ran at most once per key.
func TestConformanceGoReceiver(t *testing.T) {
	t.Parallel()
	for _, mode := range []receiver.Mode{receiver.ModeSeed, receiver.ModeIETF} {
		t.Run(string(mode), func(t *testing.T) {
			pool := receiverPool(t)
			rc, err := receiver.New(pool, receiver.Options{Mode: mode})
			if err != nil {
				t.Fatal(err)
			}
			if err := rc.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			svc := newService()
			srv := httptest.NewServer(svc.wrap(rc.Wrap(svc.handler())))
			defer srv.Close()

			res, rep := runConformance(t, srv.URL+"/v1/orders", "--mode", string(mode), "--concurrency", "10",
				"--payload", `{"sku": "A-1", "qty": 2}`, "--header", "Authorization=Bearer test-token")
			requireAllPass(t, res, rep, true)
			if strings.Contains(res.stdout+res.stderr, "test-token") {
				t.Errorf("the output shows a --header value:\n%s", res)
			}
			if rep.Mode != string(mode) || rep.Concurrency != 10 {
				t.Errorf("report mode %q concurrency %d", rep.Mode, rep.Concurrency)
			}
			// Two keys reach the handler: first-write's and the burst's.
			if most, keys := svc.maxRuns(); most != 1 || keys != 2 {
				t.Errorf("the handler ran up to %d times for one key, %d keys in all; want once for each of 2 keys", most, keys)
			}
			t.Logf("%s mode:\n%s", mode, res.stdout)
		})
	}
}

// TestConformanceFailsBrokenEndpoint: the binary exits 1 against an
// endpoint that runs the handler twice under concurrency and one that
// replays without the marker, naming the failed checks.
func TestConformanceFailsBrokenEndpoint(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		flaw conformancetest.Flaw
		fail []string
	}{
		{conformancetest.FlawRunsTwice, []string{"in-flight", "one-effect"}},
		{conformancetest.FlawNoMarker, []string{"replay", "one-effect"}},
		{conformancetest.FlawNoPayloadCheck, []string{"payload-mismatch"}},
	} {
		srv := httptest.NewServer(conformancetest.New(conformancetest.ModeSeed, c.flaw))
		res := runCLI(t, nil, "conformance", "--url", srv.URL+"/v1/orders", "--concurrency", "8")
		srv.Close()
		if res.code != 1 {
			t.Errorf("%s: exit %d, want 1\n%s", c.flaw, res.code, res)
		}
		for _, name := range c.fail {
			if !strings.Contains(res.stdout, "FAIL "+name+": ") || !strings.Contains(res.stderr, name) {
				t.Errorf("%s: check %s not named as failed\n%s", c.flaw, name, res)
			}
		}
	}
}
