package conformancetest

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

// Wire names of the replay contract (docs/reference.md §5, §11).
const (
	headerKey        = "Idempotency-Key"
	headerTuple      = "X-Agent-Idempotency-Tuple"
	headerReplay     = "Idempotency-Replay"
	headerReplayed   = "Idempotent-Replayed"
	headerConflict   = "Idempotency-Conflict"
	headerRetryAfter = "Retry-After"
	conflictMismatch = "payload-mismatch"
	conflictInFlight = "in-flight"
	// burstStep is the step_id of the tuples of `drainer conformance`'s
	// bursts (its in-flight check).
	burstStep = "in-flight"
)

// Modes of the answers (docs/reference.md §11).
const (
	ModeSeed = "seed"
	ModeIETF = "ietf"
)

// Flaw is one way an endpoint gets the replay contract wrong.
type Flaw int

const (
	FlawNone                   Flaw = iota
	FlawNoMarker                    // replays carry no replay marker
	FlawChangedBody                 // a replay's body is rebuilt, not the stored bytes
	FlawNoPayloadCheck              // a different body under a used key gets the stored answer
	FlawCachesNothing               // every request runs the handler
	FlawRunsTwice                   // check-then-act without a lock: overlapping requests all run
	FlawMismatchNoHeader            // payload mismatch: 409 without Idempotency-Conflict
	FlawInFlightNoRetry             // in-flight 409 without Retry-After
	FlawNoTupleCheck                // the tuple header is ignored
	FlawKeyOptional                 // a request without a key runs
	FlawReplayKeepsStatus           // seed mode replays a stored 201 as 201
	FlawOnlyIdempotentReplayed      // replays carry only Idempotent-Replayed: true
)

// Endpoint is an in-memory service behind an idempotency layer that follows
// the replay contract of docs/reference.md §11 in its mode, except for its
// flaw. Its handler answers 201 with a fresh id and counts effects per key.
// Set the exported fields before serving.
type Endpoint struct {
	mode  string
	flaw  Flaw
	Delay time.Duration // how long the handler runs
	// HoldBursts makes the handler of a burst's key (its tuple's step_id
	// is the in-flight check) wait until another request with that key
	// was answered 409 in flight or a second handler started for it, so a
	// burst always overlaps the first write.
	HoldBursts bool

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

// New returns an endpoint answering in mode (ModeSeed or ModeIETF) with
// flaw f (FlawNone: a correct one), holding bursts.
func New(mode string, f Flaw) *Endpoint {
	return &Endpoint{mode: mode, flaw: f, HoldBursts: true,
		records: map[string]*record{}, effects: map[string]int{}, running: map[string]int{}, conflicts: map[string]int{}}
}

// MaxEffects returns the largest number of effects any key had.
func (e *Endpoint) MaxEffects() int {
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
func (e *Endpoint) handle(key string, inBurst bool) (int, []byte) {
	e.mu.Lock()
	e.running[key]++
	e.mu.Unlock()
	if inBurst && e.HoldBursts {
		e.waitOverlap(key)
	}
	time.Sleep(e.Delay)
	e.mu.Lock()
	e.effects[key]++
	n := e.effects[key]
	e.mu.Unlock()
	body, _ := json.Marshal(map[string]any{"id": rand.Text(), "effect": n})
	return http.StatusCreated, body
}

// waitOverlap waits (at most 10s) until key saw the overlap HoldBursts wants.
func (e *Endpoint) waitOverlap(key string) {
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
	canonical, err := base64.RawURLEncoding.DecodeString(r.Header.Get(headerTuple))
	var t struct {
		StepID string `json:"step_id"`
	}
	return err == nil && json.Unmarshal(canonical, &t) == nil && t.StepID == burstStep
}

func (e *Endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	key := r.Header.Get(headerKey)
	if key == "" && e.flaw != FlawKeyOptional {
		problem(w, http.StatusBadRequest, "missing-key")
		return
	}
	if tuple := r.Header.Get(headerTuple); tuple != "" && e.flaw != FlawNoTupleCheck {
		canonical, err := base64.RawURLEncoding.DecodeString(tuple)
		sum := sha256.Sum256(canonical)
		if err != nil || "idem_v1_"+hex.EncodeToString(sum[:16]) != key {
			problem(w, http.StatusBadRequest, "tuple-mismatch")
			return
		}
	}
	burst := inBurst(r)
	fp := sha256.Sum256([]byte(r.Method + "\n" + r.URL.Path + "\n" + string(body)))
	if e.flaw == FlawCachesNothing {
		status, out := e.handle(key, burst)
		e.answer(w, status, out, false)
		return
	}
	e.mu.Lock()
	rec := e.records[key]
	switch {
	case rec == nil && e.flaw == FlawRunsTwice:
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
	case rec.fingerprint != fp && e.flaw != FlawNoPayloadCheck:
		e.mu.Unlock()
		switch {
		case e.mode == ModeIETF:
			problem(w, http.StatusUnprocessableEntity, "payload-mismatch")
		case e.flaw == FlawMismatchNoHeader:
			problem(w, http.StatusConflict, "payload-mismatch")
		default:
			w.Header().Set(headerConflict, conflictMismatch)
			problem(w, http.StatusConflict, "payload-mismatch")
		}
	case !rec.done:
		e.conflicts[key]++
		e.mu.Unlock()
		if e.flaw != FlawInFlightNoRetry {
			w.Header().Set(headerRetryAfter, "1")
		}
		w.Header().Set(headerConflict, conflictInFlight)
		problem(w, http.StatusConflict, "in-flight")
	default:
		status, out := rec.status, rec.body
		e.mu.Unlock()
		if e.flaw == FlawChangedBody {
			var v map[string]any
			_ = json.Unmarshal(out, &v)
			v["served_at"] = time.Now().UnixNano()
			out, _ = json.Marshal(v)
		}
		if e.mode == ModeSeed && e.flaw != FlawReplayKeepsStatus {
			status = http.StatusOK
		}
		e.answer(w, status, out, true)
	}
}

func (e *Endpoint) answer(w http.ResponseWriter, status int, body []byte, replay bool) {
	w.Header().Set("Content-Type", "application/json")
	switch {
	case replay && e.flaw == FlawNoMarker:
	case replay && e.flaw == FlawOnlyIdempotentReplayed:
		w.Header().Set(headerReplayed, "true")
	case replay:
		w.Header().Set(headerReplay, "true")
		w.Header().Set(headerReplayed, "true")
	default:
		w.Header().Set(headerReplay, "false")
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// String names the flaw.
func (f Flaw) String() string {
	return [...]string{"none", "no replay marker", "changed body on replay", "no payload check",
		"caches nothing", "runs the handler twice under concurrency", "mismatch 409 without header",
		"in-flight 409 without Retry-After", "tuple not verified", "key optional",
		"replay keeps 201", "only Idempotent-Replayed"}[f]
}
