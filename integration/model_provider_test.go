//go:build integration

package integration

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/drainer-io/drainer/tooling/mockprovider"
)

// scriptProvider is the provider of the model-checked test (model_test.go).
// Each row carries its own script of answers in its payload, so the model
// knows what the provider will answer to every attempt: field "s" of a
// forward payload (field "rs" of the forward payload, for the compensation
// row that undoes it) lists the answers to the first requests of its key;
// every later request is answered "ok". The provider records every request
// and effect per key, the Retry-After floors it gave, and the order in
// which compensations were applied per run.
//
// Tools named in dedupe behave like a key_idempotent provider (an effect is
// applied once per key; later requests with the same body are replays);
// every other tool is non-idempotent (each "ok" is a new effect).
type scriptProvider struct {
	dedupe map[string]bool

	mu     sync.Mutex
	keys   map[string]*scriptKey
	comps  map[string][]compEffect // run -> compensations applied, in order
	bad    []string                // malformed requests
	floors []floorViolation
}

// Answers a script may hold.
const (
	ansOK       = "ok"       // 200, effect applied
	ansMismatch = "mismatch" // 409 Idempotency-Conflict: payload-mismatch (terminal)
	ansInFlight = "inflight" // 409 without the header (retry)
	ans425      = "425"      // retry
	ans408      = "408"      // retry
	ans429RA    = "429ra"    // 429 with Retry-After: 2 (a floor)
	ans429      = "429"      // 429 without Retry-After
	ans503RA    = "503ra"    // 503 with Retry-After: 1 (a floor)
	ans500      = "500"      // retry
	ans422      = "422"      // terminal
	ans401      = "401"      // auth: no attempt consumed
	ansDrop     = "drop"     // effect applied, connection cut before the answer
	ansSlow     = "slow"     // 300ms, then ok (within the adapter timeout)
	ansLate     = "late"     // effect applied, answer after the adapter timeout
)

// scriptRetryAfter is the Retry-After of each answer that carries one.
var scriptRetryAfter = map[string]time.Duration{ans429RA: 2 * time.Second, ans503RA: time.Second}

// scriptKey is what the provider saw of one key.
type scriptKey struct {
	tool     string
	requests []time.Time
	effects  int
	effectAt time.Time
	stored   bool
	body     string // canonical body of the stored effect
	inFlight bool
	floor    time.Time // no request before (Retry-After)
	floorAt  time.Time // when the floor was given
}

// compEffect is one compensation applied.
type compEffect struct {
	forwardKey string
	at         time.Time
}

// floorViolation is a request that arrived before its Retry-After floor.
type floorViolation struct {
	key                string
	givenAt, at, floor time.Time
}

func newScriptProvider(dedupe ...string) *scriptProvider {
	p := &scriptProvider{dedupe: map[string]bool{}, keys: map[string]*scriptKey{}, comps: map[string][]compEffect{}}
	for _, tool := range dedupe {
		p.dedupe[tool] = true
	}
	return p
}

// scriptBody is the part of a request body the provider reads.
type scriptBody struct {
	S              []string `json:"s"`
	ForwardKey     *string  `json:"forward_key"`
	ForwardPayload *struct {
		RS []string `json:"rs"`
	} `json:"forward_payload"`
}

func (p *scriptProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	key := r.Header.Get(mockprovider.HeaderIdempotencyKey)
	tool := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	raw, err := io.ReadAll(r.Body)
	var body scriptBody
	if err == nil {
		err = json.Unmarshal(raw, &body)
	}
	if key == "" || err != nil {
		p.mu.Lock()
		p.bad = append(p.bad, "key "+strconv.Quote(key)+" tool "+tool)
		p.mu.Unlock()
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	canon := canonicalJSON(raw)
	script := body.S
	if body.ForwardKey != nil && body.ForwardPayload != nil {
		script = body.ForwardPayload.RS
	}

	p.mu.Lock()
	k := p.keys[key]
	if k == nil {
		k = &scriptKey{tool: tool}
		p.keys[key] = k
	}
	if !k.floor.IsZero() && now.Add(mockprovider.RetryAfterTolerance).Before(k.floor) {
		p.floors = append(p.floors, floorViolation{key: key, givenAt: k.floorAt, at: now, floor: k.floor})
	}
	k.requests = append(k.requests, now)
	n := len(k.requests)
	dedupe := p.dedupe[tool]
	switch {
	case dedupe && k.stored && k.body == canon:
		p.mu.Unlock()
		w.Header().Set(mockprovider.HeaderReplay, "true")
		writeScriptJSON(w, http.StatusOK, key)
		return
	case dedupe && k.stored:
		p.mu.Unlock()
		w.Header().Set(mockprovider.HeaderConflict, mockprovider.ConflictPayloadMismatch)
		http.Error(w, "payload mismatch", http.StatusConflict)
		return
	case dedupe && k.inFlight:
		p.mu.Unlock()
		http.Error(w, "in flight", http.StatusConflict)
		return
	}
	ans := ansOK
	if n <= len(script) {
		ans = script[n-1]
	}
	if ra, ok := scriptRetryAfter[ans]; ok {
		k.floor, k.floorAt = now.Add(ra), now
	}
	effect := ans == ansOK || ans == ansDrop || ans == ansSlow || ans == ansLate
	if effect {
		k.inFlight = true
	}
	p.mu.Unlock()

	apply := func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		k.inFlight = false
		k.stored, k.body = true, canon
		k.effects++
		if k.effects == 1 {
			k.effectAt = time.Now()
		}
		if body.ForwardKey != nil {
			run := tupleRun(r.Header.Get(mockprovider.HeaderTuple))
			p.comps[run] = append(p.comps[run], compEffect{forwardKey: *body.ForwardKey, at: time.Now()})
		}
	}
	switch ans {
	case ansOK:
		apply()
		writeScriptJSON(w, http.StatusOK, key)
	case ansSlow:
		time.Sleep(300 * time.Millisecond)
		apply()
		writeScriptJSON(w, http.StatusOK, key)
	case ansLate:
		apply()
		time.Sleep(1500 * time.Millisecond)
		writeScriptJSON(w, http.StatusOK, key)
	case ansDrop:
		apply()
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	case ansMismatch:
		w.Header().Set(mockprovider.HeaderConflict, mockprovider.ConflictPayloadMismatch)
		http.Error(w, "payload mismatch", http.StatusConflict)
	case ansInFlight:
		http.Error(w, "in flight", http.StatusConflict)
	case ans429RA, ans503RA:
		w.Header().Set("Retry-After", strconv.Itoa(int(scriptRetryAfter[ans]/time.Second)))
		code := http.StatusTooManyRequests
		if ans == ans503RA {
			code = http.StatusServiceUnavailable
		}
		http.Error(w, "retry later", code)
	default:
		code, err := strconv.Atoi(ans)
		if err != nil {
			code = http.StatusTooManyRequests // "429" parses; anything else is a test bug
		}
		http.Error(w, "scripted "+ans, code)
	}
}

func writeScriptJSON(w http.ResponseWriter, code int, key string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, `{"ok":true,"key":`+strconv.Quote(key)+`}`)
}

// canonicalJSON re-encodes a JSON document so that equal values compare
// equal as text (numbers as float64, keys sorted by encoding/json).
func canonicalJSON(raw []byte) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// tupleRun returns the agent_run_id of an X-Agent-Idempotency-Tuple header.
func tupleRun(h string) string {
	raw, err := base64.RawURLEncoding.DecodeString(h)
	if err != nil {
		return ""
	}
	var tu struct {
		AgentRunID string `json:"agent_run_id"`
	}
	_ = json.Unmarshal(raw, &tu)
	return tu.AgentRunID
}

// keyView is a copy of what the provider saw of a key.
type keyView struct {
	tool     string
	requests []time.Time
	effects  int
}

func (p *scriptProvider) key(key string) keyView {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := p.keys[key]
	if k == nil {
		return keyView{}
	}
	return keyView{tool: k.tool, requests: slices.Clone(k.requests), effects: k.effects}
}

func (p *scriptProvider) compensations(run string) []compEffect {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.comps[run])
}

func (p *scriptProvider) floorViolations() []floorViolation {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.floors)
}

func (p *scriptProvider) badRequests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.bad)
}
