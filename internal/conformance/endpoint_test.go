package conformance

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// flaw is one way an endpoint gets the replay contract wrong.
type flaw int

const (
	flawNone                   flaw = iota
	flawNoMarker                    // replays carry no replay marker
	flawChangedBody                 // a replay's body is rebuilt, not the stored bytes
	flawNoPayloadCheck              // a different body under a used key gets the stored answer
	flawCachesNothing               // every request runs the handler
	flawRunsTwice                   // check-then-act without a lock: overlapping requests all run
	flawMismatchNoHeader            // payload mismatch: 409 without Idempotency-Conflict
	flawInFlightNoRetry             // in-flight 409 without Retry-After
	flawNoTupleCheck                // the tuple header is ignored
	flawKeyOptional                 // a request without a key runs
	flawReplayKeepsStatus           // seed mode replays a stored 201 as 201
	flawOnlyIdempotentReplayed      // replays carry only Idempotent-Replayed: true
)

// endpoint is an in-memory service behind an idempotency layer that follows
// the replay contract of docs/reference.md §11 in mode, except for its flaw.
// Its handler answers 201 with a fresh id and counts effects per key.
type endpoint struct {
	mode  Mode
	flaw  flaw
	delay time.Duration // how long the handler runs
	// holdBursts makes the handler of a burst's key (its tuple's step_id
	// is the in-flight check) wait until another request with that key
	// was answered 409 in flight or a second handler started for it, so a
	// burst always overlaps the first write.
	holdBursts bool

	mu        sync.Mutex
	records   map[string]*record
	effects   map[string]int
	running   map[string]int // handlers started per key
	conflicts map[string]int // in-flight answers given per key
}

type record struct {
	fingerprint [32]byte
	done        bool
	status      int
	body        []byte
}

func newEndpoint(m Mode, f flaw, delay time.Duration) *endpoint {
	return &endpoint{mode: m, flaw: f, delay: delay, holdBursts: true,
		records: map[string]*record{}, effects: map[string]int{}, running: map[string]int{}, conflicts: map[string]int{}}
}

// maxEffects returns the largest number of effects any key had.
func (e *endpoint) maxEffects() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, c := range e.effects {
		n = max(n, c)
	}
	return n
}

func problem(w http.ResponseWriter, status int, slug string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "https://drainer.dev/problems/" + slug, "title": slug, "status": status})
}

// handle is the service's handler: one effect, a fresh body.
func (e *endpoint) handle(key string, inBurst bool) (int, []byte) {
	e.mu.Lock()
	e.running[key]++
	e.mu.Unlock()
	if inBurst && e.holdBursts {
		e.waitOverlap(key)
	}
	time.Sleep(e.delay)
	e.mu.Lock()
	e.effects[key]++
	n := e.effects[key]
	e.mu.Unlock()
	body, _ := json.Marshal(map[string]any{"id": rand.Text(), "effect": n})
	return http.StatusCreated, body
}

// waitOverlap waits (at most 10s) until key saw the overlap holdBursts wants.
func (e *endpoint) waitOverlap(key string) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		e.mu.Lock()
		ok := e.conflicts[key] > 0 || e.running[key] > 1
		e.mu.Unlock()
		if ok {
			return
		}
	}
}

// inBurst reports whether r belongs to a burst: its tuple's step_id names
// the in-flight check.
func inBurst(r *http.Request) bool {
	canonical, err := base64.RawURLEncoding.DecodeString(r.Header.Get(HeaderTuple))
	var t struct {
		StepID string `json:"step_id"`
	}
	return err == nil && json.Unmarshal(canonical, &t) == nil && t.StepID == string(CheckInFlight)
}

func (e *endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	key := r.Header.Get(HeaderKey)
	if key == "" && e.flaw != flawKeyOptional {
		problem(w, http.StatusBadRequest, "missing-key")
		return
	}
	if tuple := r.Header.Get(HeaderTuple); tuple != "" && e.flaw != flawNoTupleCheck {
		canonical, err := base64.RawURLEncoding.DecodeString(tuple)
		sum := sha256.Sum256(canonical)
		if err != nil || "idem_v1_"+hex.EncodeToString(sum[:16]) != key {
			problem(w, http.StatusBadRequest, "tuple-mismatch")
			return
		}
	}
	burst := inBurst(r)
	fp := sha256.Sum256([]byte(r.Method + "\n" + r.URL.Path + "\n" + string(body)))
	if e.flaw == flawCachesNothing {
		status, out := e.handle(key, burst)
		e.answer(w, status, out, false)
		return
	}
	e.mu.Lock()
	rec := e.records[key]
	switch {
	case rec == nil && e.flaw == flawRunsTwice:
		e.mu.Unlock()
		status, out := e.handle(key, burst)
		e.mu.Lock()
		e.records[key] = &record{fingerprint: fp, done: true, status: status, body: out}
		e.mu.Unlock()
		e.answer(w, status, out, false)
	case rec == nil:
		rec = &record{fingerprint: fp}
		e.records[key] = rec
		e.mu.Unlock()
		status, out := e.handle(key, burst)
		e.mu.Lock()
		rec.done, rec.status, rec.body = true, status, out
		e.mu.Unlock()
		e.answer(w, status, out, false)
	case rec.fingerprint != fp && e.flaw != flawNoPayloadCheck:
		e.mu.Unlock()
		switch {
		case e.mode == ModeIETF:
			problem(w, http.StatusUnprocessableEntity, "payload-mismatch")
		case e.flaw == flawMismatchNoHeader:
			problem(w, http.StatusConflict, "payload-mismatch")
		default:
			w.Header().Set(HeaderConflict, ConflictMismatch)
			problem(w, http.StatusConflict, "payload-mismatch")
		}
	case !rec.done:
		e.conflicts[key]++
		e.mu.Unlock()
		if e.flaw != flawInFlightNoRetry {
			w.Header().Set(HeaderRetryAfter, "1")
		}
		w.Header().Set(HeaderConflict, ConflictInFlight)
		problem(w, http.StatusConflict, "in-flight")
	default:
		status, out := rec.status, rec.body
		e.mu.Unlock()
		if e.flaw == flawChangedBody {
			var v map[string]any
			_ = json.Unmarshal(out, &v)
			v["served_at"] = time.Now().UnixNano()
			out, _ = json.Marshal(v)
		}
		if e.mode == ModeSeed && e.flaw != flawReplayKeepsStatus {
			status = http.StatusOK
		}
		e.answer(w, status, out, true)
	}
}

func (e *endpoint) answer(w http.ResponseWriter, status int, body []byte, replay bool) {
	w.Header().Set("Content-Type", "application/json")
	switch {
	case replay && e.flaw == flawNoMarker:
	case replay && e.flaw == flawOnlyIdempotentReplayed:
		w.Header().Set(HeaderReplayed, "true")
	case replay:
		w.Header().Set(HeaderReplay, "true")
		w.Header().Set(HeaderReplayed, "true")
	default:
		w.Header().Set(HeaderReplay, "false")
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (f flaw) String() string {
	return [...]string{"none", "no replay marker", "changed body on replay", "no payload check",
		"caches nothing", "runs the handler twice under concurrency", "mismatch 409 without header",
		"in-flight 409 without Retry-After", "tuple not verified", "key optional",
		"replay keeps 201", "only Idempotent-Replayed"}[f]
}
