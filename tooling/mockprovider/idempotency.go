package mockprovider

import (
	"crypto/sha256"
	"net/http"
	"slices"
)

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

// admission is the outcome of the idempotency check of one request.
type admission int

const (
	admitted admission = iota // the caller holds the key and must finish or release it
	admitReplay
	admitMismatch
	admitInFlight
	admitFailFirst
)

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

// finishFault releases the key unless the effect was already committed.
func (p *Provider) finishFault(key string, committed bool) {
	if !committed {
		p.release(key)
	}
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

// DuplicateEffects returns, sorted, the keys whose effect was applied more
// than once. It is a self-check of the provider and is always empty.
func (p *Provider) DuplicateEffects() []string {
	p.mu.Lock()
	out := slices.Clone(p.duplicates)
	p.mu.Unlock()
	slices.Sort(out)
	return out
}
