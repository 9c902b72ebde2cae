// Package mockprovider is an in-process HTTP provider that behaves like a real
// idempotent API (Stripe-style Idempotency-Key semantics) and injects faults on
// demand. It backs `drainer demo`, the end-to-end tests and the benchmarks.
//
// Every request must carry an Idempotency-Key header. Per key, the provider
// keeps one record:
//
//   - The first request that reaches the "effect" applies it once, stores the
//     SHA-256 of the body with the answer, and counts one effect.
//   - A later request with the same key and the same body gets the stored
//     answer again with "Idempotency-Replay: true" and counts no effect.
//   - The same key with a different body gets 409 with
//     "Idempotency-Conflict: payload-mismatch" (terminal for the client).
//   - A request whose key is being processed by another request gets 409
//     without that header (the client retries later).
//
// A request that fails before the effect (a fault, a client that went away)
// leaves no stored answer, so a retry is processed afresh, as with Stripe.
//
// Faults are configured in Config. The per-request fault choice is a pure
// function of (Seed, key, n), where n counts the requests seen with that key,
// so a run is reproducible whenever each key's requests arrive in the same
// order, whatever the interleaving between keys.
//
// Bookkeeping (Effects, KeysForTuple, DuplicateEffects, Snapshot, ...) is safe
// for concurrent use. No lock is held across a sleep or any network I/O.
package mockprovider

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Wire names of the contract (CONTRACT.md §5).
const (
	HeaderIdempotencyKey    = "Idempotency-Key"
	HeaderTuple             = "X-Agent-Idempotency-Tuple"
	HeaderReplay            = "Idempotency-Replay"
	HeaderConflict          = "Idempotency-Conflict"
	ConflictPayloadMismatch = "payload-mismatch"
)

// StatusOverloaded is the non-standard "529 Site is overloaded" status.
const StatusOverloaded = 529

// DefaultAddr is the listen address Start uses when given "".
const DefaultAddr = "127.0.0.1:0"

// MaxBodyBytes is the largest request body accepted; larger bodies get 413.
const MaxBodyBytes = 16 << 20

// keyPrefix is the prefix of contract §1 keys, checked by Config.VerifyTuple.
const keyPrefix = "idem_v1_"

// shutdownTimeout bounds the graceful part of Close.
const shutdownTimeout = 5 * time.Second

// Config configures a Provider. The zero value is a well-behaved provider with
// no faults and no latency.
//
// The random fault rates are fractions in [0, 1] (values outside are
// clamped). They are mutually exclusive and drawn once per request that would
// apply the effect, in this order: Fail503, Fail429, Fail529, Timeout,
// ResetAfterEffect; if they add up to more than 1, the later ones get what is
// left. Replays, conflicts, terminal tools and FailFirstN answers are never
// subject to random faults.
type Config struct {
	// Seed makes the fault choices reproducible (see the package doc).
	Seed int64

	// Fail503 is the fraction of requests answered 503 Service Unavailable.
	Fail503 float64
	// Fail429 is the fraction answered 429 Too Many Requests, with
	// "Retry-After: RetryAfterSeconds".
	Fail429 float64
	// Fail529 is the fraction answered 529 (overloaded).
	Fail529 float64
	// Timeout is the fraction of requests that sleep TimeoutDelay and then
	// answer 504, so that a client with a shorter timeout gives up first. The
	// key stays in flight during the sleep: a concurrent retry gets 409.
	Timeout float64
	// ResetAfterEffect is the fraction of requests that apply the effect and
	// then close the connection without answering: the ambiguous case. A
	// retry with the same key gets a replay.
	ResetAfterEffect float64

	// RetryAfterSeconds is the Retry-After value sent with 429. A negative
	// value sends no Retry-After header.
	RetryAfterSeconds int
	// TimeoutDelay is how long a Timeout fault sleeps before answering.
	TimeoutDelay time.Duration
	// Latency is added to every request that passes validation, before any
	// other processing. A client that goes away during it is not processed.
	Latency time.Duration

	// TerminalTools maps a tool name to the HTTP status always returned for
	// it (e.g. 422). The tool name is the last segment of the request path,
	// path-unescaped. These answers apply no effect and store nothing.
	TerminalTools map[string]int

	// FailFirstN makes the first N requests of every key fail with 503
	// before any idempotency processing (never with an effect), so every key
	// needs exactly N retries.
	FailFirstN int

	// ApplyEffectBeforeFault applies (and stores) the effect before answering
	// a random 5xx fault (Fail503, Fail529) or sleeping for a Timeout fault:
	// a provider that did the work but failed to say so. A retry gets a
	// replay of the success.
	ApplyEffectBeforeFault bool

	// VerifyTuple, when set, answers 400 to a request whose
	// X-Agent-Idempotency-Tuple header is missing, is not unpadded base64url,
	// or does not hash to its Idempotency-Key under the contract's key scheme
	// ("idem_v1_" + first 32 hex digits of SHA-256 of the decoded tuple).
	VerifyTuple bool
}

// Stats counts requests by answer class. Once the provider is quiescent,
// the answer classes (every field but Requests, Effects and
// EffectsBeforeFault) add up to Requests.
type Stats struct {
	Requests int // every request received

	Effects            int // effects applied (one per key for a correct provider)
	EffectsBeforeFault int // effects applied under ApplyEffectBeforeFault, answered with a fault

	Successes         int // 200 answers that applied the effect now
	Replays           int // 200 answers replayed from the store
	Mismatches        int // 409 with Idempotency-Conflict: payload-mismatch
	InFlightConflicts int // 409: the key was being processed by another request
	BadRequests       int // 400 or 413: missing key, invalid JSON, bad tuple, body too large
	Terminal          int // TerminalTools answers
	Unavailable       int // 503, from Fail503 or FailFirstN
	RateLimited       int // 429
	Overloaded        int // 529
	Timeouts          int // 504 after TimeoutDelay (or when the client left during it)
	Resets            int // connections closed after the effect without an answer
	Aborted           int // client left (or the provider closed) during Latency
}

// Provider is a mock idempotent HTTP provider. It implements http.Handler, so
// it can be served by httptest.NewServer as well as by Start.
type Provider struct {
	cfg Config

	mu         sync.Mutex
	keys       map[string]*record
	duplicates []string

	tmu    sync.Mutex
	tuples map[string][]string

	st   counters
	ra   retryAfterBook
	comp compensationBook

	done      chan struct{}
	closeOnce sync.Once

	srvMu  sync.Mutex
	srv    *http.Server
	served chan struct{}
	closed bool
}

// record is the idempotency state of one key, guarded by Provider.mu.
type record struct {
	requests int  // requests seen with this key (FailFirstN, fault draws)
	inFlight bool // a request holds the key between admission and its answer
	stored   bool // an effect was applied; hash/status/body are the answer
	hash     [sha256.Size]byte
	status   int
	body     []byte
	effects  int
}

type counters struct {
	requests, effects, effectsBeforeFault                    atomic.Int64
	successes, replays, mismatches, inFlight, badRequests    atomic.Int64
	terminal, unavailable, rateLimited, overloaded, timeouts atomic.Int64
	resets, aborted                                          atomic.Int64
}

// New returns a Provider configured by cfg. The TerminalTools map is copied;
// New panics if one of its statuses is not a three-digit HTTP status.
func New(cfg Config) *Provider {
	cfg.Fail503 = clamp01(cfg.Fail503)
	cfg.Fail429 = clamp01(cfg.Fail429)
	cfg.Fail529 = clamp01(cfg.Fail529)
	cfg.Timeout = clamp01(cfg.Timeout)
	cfg.ResetAfterEffect = clamp01(cfg.ResetAfterEffect)
	if cfg.TerminalTools != nil {
		m := make(map[string]int, len(cfg.TerminalTools))
		for tool, status := range cfg.TerminalTools {
			if status < 100 || status > 999 {
				panic(fmt.Sprintf("mockprovider: TerminalTools[%q] = %d is not an HTTP status", tool, status))
			}
			m[tool] = status
		}
		cfg.TerminalTools = m
	}
	return &Provider{
		cfg:    cfg,
		keys:   make(map[string]*record),
		tuples: make(map[string][]string),
		done:   make(chan struct{}),
	}
}

func clamp01(f float64) float64 {
	if !(f > 0) { // also catches NaN
		return 0
	}
	return min(f, 1)
}

// Start serves p on addr (DefaultAddr when empty) and returns the base URL,
// e.g. "http://127.0.0.1:41234". Any path under it is accepted; the last path
// segment names the tool. Start fails if p was already started or closed.
func (p *Provider) Start(addr string) (string, error) {
	if addr == "" {
		addr = DefaultAddr
	}
	p.srvMu.Lock()
	defer p.srvMu.Unlock()
	switch {
	case p.closed:
		return "", errors.New("mockprovider: start after Close")
	case p.srv != nil:
		return "", errors.New("mockprovider: already started")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	p.served = make(chan struct{})
	go func(srv *http.Server, served chan<- struct{}) {
		defer close(served)
		_ = srv.Serve(ln) // always ErrServerClosed or a listener error after Close
	}(p.srv, p.served)
	return "http://" + ln.Addr().String(), nil
}

// Close interrupts every pending Latency or Timeout sleep and, if Start was
// called, shuts the server down gracefully (forcefully after a few seconds)
// and waits for it to stop. It is safe to call more than once.
func (p *Provider) Close() {
	p.closeOnce.Do(func() { close(p.done) })

	p.srvMu.Lock()
	p.closed = true
	srv, served := p.srv, p.served
	p.srvMu.Unlock()
	if srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		_ = srv.Close()
	}
	<-served
}

// admission is the outcome of the idempotency check of one request.
type admission int

const (
	admitted admission = iota // the caller holds the key and must finish or release it
	admitReplay
	admitMismatch
	admitInFlight
	admitFailFirst
)

// fault is the fault chosen for an admitted request.
type fault int

const (
	faultNone fault = iota
	fault503
	fault429
	fault529
	faultTimeout
	faultReset
)

// ServeHTTP implements http.Handler.
func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.st.requests.Add(1)

	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		p.st.badRequests.Add(1)
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeProblem(w, http.StatusRequestEntityTooLarge, "request body too large")
			return
		}
		writeProblem(w, http.StatusBadRequest, "cannot read request body")
		return
	}
	key := r.Header.Get(HeaderIdempotencyKey)
	if key == "" {
		p.st.badRequests.Add(1)
		writeProblem(w, http.StatusBadRequest, "missing "+HeaderIdempotencyKey+" header")
		return
	}
	p.ra.check(key, time.Now())
	tuple := r.Header.Get(HeaderTuple)
	if tuple != "" {
		p.recordTuple(tuple, key)
	}
	if p.cfg.VerifyTuple {
		if msg := verifyTuple(tuple, key); msg != "" {
			p.st.badRequests.Add(1)
			writeProblem(w, http.StatusBadRequest, msg)
			return
		}
	}
	if !json.Valid(body) {
		p.st.badRequests.Add(1)
		writeProblem(w, http.StatusBadRequest, "request body is not valid JSON")
		return
	}

	if !p.sleep(r.Context(), p.cfg.Latency) {
		p.st.aborted.Add(1)
		return
	}

	tool := toolName(r.URL)
	if status, ok := p.cfg.TerminalTools[tool]; ok {
		p.st.terminal.Add(1)
		writeProblem(w, status, "tool "+strconv.Quote(tool)+" always fails")
		return
	}

	hash := sha256.Sum256(body)
	adm, n, status, stored := p.admit(key, hash)
	switch adm {
	case admitReplay:
		p.st.replays.Add(1)
		w.Header().Set(HeaderReplay, "true")
		writeJSON(w, status, stored)
		return
	case admitMismatch:
		p.st.mismatches.Add(1)
		w.Header().Set(HeaderConflict, ConflictPayloadMismatch)
		writeProblem(w, http.StatusConflict, "idempotency key reused with a different request body")
		return
	case admitInFlight:
		p.st.inFlight.Add(1)
		writeProblem(w, http.StatusConflict, "a request with this idempotency key is in progress")
		return
	case admitFailFirst:
		p.st.unavailable.Add(1)
		writeProblem(w, http.StatusServiceUnavailable, "injected failure (FailFirstN)")
		return
	}

	// The key is ours until commit or release.
	f := p.pickFault(key, n)
	if f == faultNone {
		resp := successBody(key, tool, body)
		p.commit(key, hash, resp)
		p.comp.note(tuple, body)
		p.st.successes.Add(1)
		writeJSON(w, http.StatusOK, resp)
		return
	}
	effectFirst := f == faultReset ||
		(p.cfg.ApplyEffectBeforeFault && (f == fault503 || f == fault529 || f == faultTimeout))
	if effectFirst {
		p.commit(key, hash, successBody(key, tool, body))
		p.comp.note(tuple, body)
		if f != faultReset {
			p.st.effectsBeforeFault.Add(1)
		}
	}
	switch f {
	case fault503:
		p.finishFault(key, effectFirst)
		p.st.unavailable.Add(1)
		writeProblem(w, http.StatusServiceUnavailable, "injected failure (Fail503)")
	case fault429:
		p.release(key)
		p.st.rateLimited.Add(1)
		if p.cfg.RetryAfterSeconds >= 0 {
			p.ra.give(key, time.Now(), time.Duration(p.cfg.RetryAfterSeconds)*time.Second)
			w.Header().Set("Retry-After", strconv.Itoa(p.cfg.RetryAfterSeconds))
		}
		writeProblem(w, http.StatusTooManyRequests, "injected failure (Fail429)")
	case fault529:
		p.finishFault(key, effectFirst)
		p.st.overloaded.Add(1)
		writeProblem(w, StatusOverloaded, "injected failure (Fail529)")
	case faultTimeout:
		p.sleep(r.Context(), p.cfg.TimeoutDelay)
		p.finishFault(key, effectFirst)
		p.st.timeouts.Add(1)
		writeProblem(w, http.StatusGatewayTimeout, "injected failure (Timeout)")
	case faultReset:
		p.st.resets.Add(1)
		abortConnection(w)
	}
}

// finishFault releases the key unless the effect was already committed.
func (p *Provider) finishFault(key string, committed bool) {
	if !committed {
		p.release(key)
	}
}

// admit runs the idempotency check for one request with the given key and
// body hash. On admitted, the caller holds the key and n is this request's
// number among the key's requests. On admitReplay, status and body are the
// stored answer.
func (p *Provider) admit(key string, hash [sha256.Size]byte) (adm admission, n, status int, body []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rec := p.keys[key]
	if rec == nil {
		rec = &record{}
		p.keys[key] = rec
	}
	rec.requests++
	n = rec.requests
	switch {
	case rec.stored && rec.hash == hash:
		return admitReplay, n, rec.status, rec.body
	case rec.stored:
		return admitMismatch, n, 0, nil
	case rec.inFlight:
		return admitInFlight, n, 0, nil
	case n <= p.cfg.FailFirstN:
		return admitFailFirst, n, 0, nil
	}
	rec.inFlight = true
	return admitted, n, 0, nil
}

// commit applies the effect of the admitted request holding key: it stores
// the answer, counts the effect and releases the key.
func (p *Provider) commit(key string, hash [sha256.Size]byte, body []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rec := p.keys[key]
	rec.inFlight = false
	rec.stored = true
	rec.hash = hash
	rec.status = http.StatusOK
	rec.body = body
	rec.effects++
	if rec.effects == 2 {
		p.duplicates = append(p.duplicates, key)
	}
	p.st.effects.Add(1)
}

// release gives up the key held by an admitted request without an effect.
func (p *Provider) release(key string) {
	p.mu.Lock()
	p.keys[key].inFlight = false
	p.mu.Unlock()
}

func (p *Provider) recordTuple(tuple, key string) {
	p.tmu.Lock()
	defer p.tmu.Unlock()
	keys := p.tuples[tuple]
	if !slices.Contains(keys, key) {
		p.tuples[tuple] = append(keys, key)
	}
}

// pickFault draws the random fault of the n-th request of key.
func (p *Provider) pickFault(key string, n int) fault {
	c := &p.cfg
	if c.Fail503+c.Fail429+c.Fail529+c.Timeout+c.ResetAfterEffect == 0 {
		return faultNone
	}
	u := uniform(c.Seed, key, n)
	for _, x := range [...]struct {
		rate float64
		f    fault
	}{
		{c.Fail503, fault503},
		{c.Fail429, fault429},
		{c.Fail529, fault529},
		{c.Timeout, faultTimeout},
		{c.ResetAfterEffect, faultReset},
	} {
		if u < x.rate {
			return x.f
		}
		u -= x.rate
	}
	return faultNone
}

// uniform returns a number in [0, 1) that depends only on seed, key and n.
func uniform(seed int64, key string, n int) float64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	var buf [16]byte
	binary.LittleEndian.PutUint64(buf[:8], uint64(seed))
	binary.LittleEndian.PutUint64(buf[8:], uint64(n))
	for _, b := range buf {
		h = (h ^ uint64(b)) * prime
	}
	for i := 0; i < len(key); i++ {
		h = (h ^ uint64(key[i])) * prime
	}
	// splitmix64 finalizer: FNV alone mixes the last bytes poorly.
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return float64(h>>11) / (1 << 53)
}

// sleep waits d, or until ctx is done or p is closed; it reports whether the
// full duration elapsed.
func (p *Provider) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-p.done:
		return false
	}
}

// toolName returns the last segment of u's path, path-unescaped.
func toolName(u *url.URL) string {
	seg := strings.TrimRight(u.EscapedPath(), "/")
	seg = seg[strings.LastIndexByte(seg, '/')+1:]
	if s, err := url.PathUnescape(seg); err == nil {
		return s
	}
	return seg
}

// verifyTuple checks the tuple header against key; it returns "" when they
// match, else what is wrong.
func verifyTuple(tuple, key string) string {
	if tuple == "" {
		return "missing " + HeaderTuple + " header"
	}
	canonical, err := base64.RawURLEncoding.DecodeString(tuple)
	if err != nil {
		return HeaderTuple + " is not unpadded base64url"
	}
	sum := sha256.Sum256(canonical)
	if key != keyPrefix+hex.EncodeToString(sum[:16]) {
		return HeaderIdempotencyKey + " does not match " + HeaderTuple
	}
	return ""
}

// ResponseID returns the id the provider puts in its success answer for key.
func ResponseID(key string) string {
	sum := sha256.Sum256([]byte("mockprovider:" + key))
	return "mock_" + hex.EncodeToString(sum[:12])
}

// SuccessBody is the JSON answer to a request that applied its effect.
type SuccessBody struct {
	ID       string          `json:"id"`
	Tool     string          `json:"tool"`
	Received json.RawMessage `json:"received"`
}

func successBody(key, tool string, payload []byte) []byte {
	b, err := json.Marshal(SuccessBody{ID: ResponseID(key), Tool: tool, Received: payload})
	if err != nil { // payload was validated by json.Valid
		panic("mockprovider: marshal success body: " + err.Error())
	}
	return b
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// writeProblem answers with an RFC 9457 problem document.
func writeProblem(w http.ResponseWriter, status int, detail string) {
	b, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{"about:blank", statusText(status), status, detail})
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func statusText(status int) string {
	if status == StatusOverloaded {
		return "Site Is Overloaded"
	}
	if t := http.StatusText(status); t != "" {
		return t
	}
	return "Status " + strconv.Itoa(status)
}

// abortConnection drops the connection without writing an answer. HTTP/1
// connections are hijacked and closed; where hijacking is not supported
// (HTTP/2), the handler aborts, which resets the stream.
func abortConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

// Effects returns the number of effects applied for key (0 or 1 for a
// correct provider).
func (p *Provider) Effects(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if rec := p.keys[key]; rec != nil {
		return rec.effects
	}
	return 0
}

// TotalEffects returns the number of effects applied over all keys.
func (p *Provider) TotalEffects() int { return int(p.st.effects.Load()) }

// Requests returns the number of requests received.
func (p *Provider) Requests() int { return int(p.st.requests.Load()) }

// Replays returns the number of answers replayed from the idempotency store.
func (p *Provider) Replays() int { return int(p.st.replays.Load()) }

// KeysForTuple returns, in first-seen order, every Idempotency-Key received
// with the given X-Agent-Idempotency-Tuple header value. More than one key
// means a client sent one intent under two keys.
func (p *Provider) KeysForTuple(tupleHeader string) []string {
	p.tmu.Lock()
	defer p.tmu.Unlock()
	return slices.Clone(p.tuples[tupleHeader])
}

// MultiKeyTuples returns, sorted, every X-Agent-Idempotency-Tuple value seen
// with more than one Idempotency-Key. It is empty for a correct client.
func (p *Provider) MultiKeyTuples() []string {
	p.tmu.Lock()
	defer p.tmu.Unlock()
	var out []string
	for t, keys := range p.tuples {
		if len(keys) > 1 {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

// DuplicateEffects returns, sorted, the keys whose effect was applied more
// than once. It is a self-check of the provider and is always empty.
func (p *Provider) DuplicateEffects() []string {
	p.mu.Lock()
	out := slices.Clone(p.duplicates)
	p.mu.Unlock()
	slices.Sort(out)
	return out
}

// Snapshot returns the current counters. Counters are read one by one, so a
// snapshot taken under load is not atomic across fields.
func (p *Provider) Snapshot() Stats {
	s := &p.st
	return Stats{
		Requests:           int(s.requests.Load()),
		Effects:            int(s.effects.Load()),
		EffectsBeforeFault: int(s.effectsBeforeFault.Load()),
		Successes:          int(s.successes.Load()),
		Replays:            int(s.replays.Load()),
		Mismatches:         int(s.mismatches.Load()),
		InFlightConflicts:  int(s.inFlight.Load()),
		BadRequests:        int(s.badRequests.Load()),
		Terminal:           int(s.terminal.Load()),
		Unavailable:        int(s.unavailable.Load()),
		RateLimited:        int(s.rateLimited.Load()),
		Overloaded:         int(s.overloaded.Load()),
		Timeouts:           int(s.timeouts.Load()),
		Resets:             int(s.resets.Load()),
		Aborted:            int(s.aborted.Load()),
	}
}
