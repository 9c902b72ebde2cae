package mockprovider

import (
	"encoding/base64"
	"encoding/json"
	"sync"
	"time"
)

// RetryAfterTolerance is how early a request may arrive before the
// Retry-After the provider gave its key and still not count as a violation:
// the client's clock and timers are coarser than the provider's.
const RetryAfterTolerance = 200 * time.Millisecond

// retryAfterBook remembers, per key, when the Retry-After last given to that
// key expires (on the provider's own clock), and counts requests that
// arrived before it.
type retryAfterBook struct {
	mu         sync.Mutex
	notBefore  map[string]time.Time
	givenAt    map[string]time.Time
	violations []string
	details    []RetryAfterViolation
}

// RetryAfterViolation is one request that arrived before the Retry-After
// last given to its key expired.
type RetryAfterViolation struct {
	Key string
	// GivenAt is when the provider answered that Retry-After; At is when
	// the early request arrived; NotBefore is when the Retry-After expired.
	GivenAt, At, NotBefore time.Time
}

// check counts a violation if a request for key arrives now, before the
// Retry-After last given to it expired.
func (b *retryAfterBook) check(key string, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if nb, ok := b.notBefore[key]; ok && now.Add(RetryAfterTolerance).Before(nb) {
		b.violations = append(b.violations, key)
		b.details = append(b.details, RetryAfterViolation{Key: key, GivenAt: b.givenAt[key], At: now, NotBefore: nb})
	}
}

// give records that key was told to retry no sooner than after d.
func (b *retryAfterBook) give(key string, now time.Time, d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.notBefore == nil {
		b.notBefore, b.givenAt = map[string]time.Time{}, map[string]time.Time{}
	}
	b.notBefore[key], b.givenAt[key] = now.Add(d), now
}

// RetryAfterViolationDetails returns every violation with its times, for
// checks that must tell apart a Retry-After the client cannot have received
// (its answer lost on the way, e.g. by a fault injected between them).
func (p *Provider) RetryAfterViolationDetails() []RetryAfterViolation {
	p.ra.mu.Lock()
	defer p.ra.mu.Unlock()
	return append([]RetryAfterViolation(nil), p.ra.details...)
}

// RetryAfterViolations returns the keys (one entry per offending request)
// whose request arrived more than RetryAfterTolerance before the Retry-After
// the provider had last answered for that key expired.
func (p *Provider) RetryAfterViolations() []string {
	p.ra.mu.Lock()
	defer p.ra.mu.Unlock()
	return append([]string(nil), p.ra.violations...)
}

// compensationBook records, per agent_run_id, the forward_key of every
// compensation request whose effect the provider applied, in order.
type compensationBook struct {
	mu    sync.Mutex
	byRun map[string][]string
}

// note records an applied request if its body is a compensation payload
// (a JSON object with a string forward_key) and its tuple header names a run.
func (b *compensationBook) note(tupleHeader string, body []byte) {
	var pl struct {
		ForwardKey *string `json:"forward_key"`
	}
	if json.Unmarshal(body, &pl) != nil || pl.ForwardKey == nil {
		return
	}
	raw, err := base64.RawURLEncoding.DecodeString(tupleHeader)
	if err != nil {
		return
	}
	var tu struct {
		AgentRunID string `json:"agent_run_id"`
	}
	if json.Unmarshal(raw, &tu) != nil || tu.AgentRunID == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byRun == nil {
		b.byRun = map[string][]string{}
	}
	b.byRun[tu.AgentRunID] = append(b.byRun[tu.AgentRunID], *pl.ForwardKey)
}

// Compensations returns, per agent_run_id, the forward keys of the
// compensations the provider applied, in the order their effects happened.
// Only requests carrying X-Agent-Idempotency-Tuple are recorded.
func (p *Provider) Compensations() map[string][]string {
	p.comp.mu.Lock()
	defer p.comp.mu.Unlock()
	out := make(map[string][]string, len(p.comp.byRun))
	for run, keys := range p.comp.byRun {
		out[run] = append([]string(nil), keys...)
	}
	return out
}
