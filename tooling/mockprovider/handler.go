package mockprovider

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// request is what the handler takes from a valid request.
type request struct {
	key   string // Idempotency-Key
	tuple string // X-Agent-Idempotency-Tuple, "" when absent
	tool  string // last path segment, path-unescaped
	body  []byte
	hash  [sha256.Size]byte // of body
}

// ServeHTTP implements http.Handler.
func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.st.requests.Add(1)
	req, ok := p.readRequest(w, r)
	if !ok {
		return
	}
	if !p.sleep(r.Context(), p.cfg.Latency) {
		p.st.aborted.Add(1)
		return
	}
	if status, ok := p.cfg.TerminalTools[req.tool]; ok {
		p.st.terminal.Add(1)
		writeProblem(w, status, "tool "+strconv.Quote(req.tool)+" always fails")
		return
	}
	adm, n, status, stored := p.admit(req.key, req.hash)
	if adm != admitted {
		p.answerUnadmitted(w, adm, status, stored)
		return
	}
	// The key is ours until commit or release.
	f := p.pickFault(req.key, n)
	if f == faultNone && p.cfg.LoseAnswer[req.key] {
		// Admitted means no answer is stored yet: this request applies the
		// effect, so the answer is lost exactly once.
		f = faultReset
	}
	if f == faultNone {
		resp := p.applyEffect(req)
		p.st.successes.Add(1)
		writeJSON(w, http.StatusOK, resp)
		return
	}
	p.answerFault(r.Context(), w, req, f)
}

// readRequest reads r's body and headers and validates them. A request that
// carries a key is checked against the Retry-After given to that key, and
// its tuple header is recorded, before the rest is validated. When ok is
// false, the request has been answered.
func (p *Provider) readRequest(w http.ResponseWriter, r *http.Request) (req *request, ok bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge {
			p.badRequest(w, http.StatusRequestEntityTooLarge, "request body too large")
			return nil, false
		}
		p.badRequest(w, http.StatusBadRequest, "cannot read request body")
		return nil, false
	}
	key := r.Header.Get(HeaderIdempotencyKey)
	if key == "" {
		p.badRequest(w, http.StatusBadRequest, "missing "+HeaderIdempotencyKey+" header")
		return nil, false
	}
	p.ra.check(key, time.Now())
	tuple := r.Header.Get(HeaderTuple)
	if tuple != "" {
		p.recordTuple(tuple, key)
	}
	if p.cfg.VerifyTuple {
		if msg := verifyTuple(tuple, key); msg != "" {
			p.badRequest(w, http.StatusBadRequest, msg)
			return nil, false
		}
	}
	if !json.Valid(body) {
		p.badRequest(w, http.StatusBadRequest, "request body is not valid JSON")
		return nil, false
	}
	return &request{key: key, tuple: tuple, tool: toolName(r.URL), body: body, hash: sha256.Sum256(body)}, true
}

// badRequest counts and answers a request that failed validation.
func (p *Provider) badRequest(w http.ResponseWriter, status int, detail string) {
	p.st.badRequests.Add(1)
	writeProblem(w, status, detail)
}

// answerUnadmitted answers a request the idempotency check did not admit;
// on admitReplay, status and stored are the stored answer.
func (p *Provider) answerUnadmitted(w http.ResponseWriter, adm admission, status int, stored []byte) {
	switch adm {
	case admitReplay:
		p.st.replays.Add(1)
		w.Header().Set(HeaderReplay, "true")
		writeJSON(w, status, stored)
	case admitMismatch:
		p.st.mismatches.Add(1)
		w.Header().Set(HeaderConflict, ConflictPayloadMismatch)
		writeProblem(w, http.StatusConflict, "idempotency key reused with a different request body")
	case admitInFlight:
		p.st.inFlight.Add(1)
		writeProblem(w, http.StatusConflict, "a request with this idempotency key is in progress")
	case admitFailFirst:
		p.st.unavailable.Add(1)
		writeProblem(w, http.StatusServiceUnavailable, "injected failure (FailFirstN)")
	}
}

// applyEffect applies the effect of the admitted request req: it commits
// the success answer, which it returns, and notes a compensation.
func (p *Provider) applyEffect(req *request) []byte {
	resp := successBody(req.key, req.tool, req.body)
	p.commit(req.key, req.hash, resp)
	p.comp.note(req.tuple, req.body)
	return resp
}

// answerFault answers the admitted request req with fault f. A reset, and
// a 5xx or Timeout fault under ApplyEffectBeforeFault, apply the effect
// first; otherwise the key is released without an effect.
func (p *Provider) answerFault(ctx context.Context, w http.ResponseWriter, req *request, f fault) {
	effectFirst := f == faultReset ||
		(p.cfg.ApplyEffectBeforeFault && (f == fault503 || f == fault529 || f == faultTimeout))
	if effectFirst {
		p.applyEffect(req)
		if f != faultReset {
			p.st.effectsBeforeFault.Add(1)
		}
	}
	switch f {
	case fault503:
		p.finishFault(req.key, effectFirst)
		p.st.unavailable.Add(1)
		writeProblem(w, http.StatusServiceUnavailable, "injected failure (Fail503)")
	case fault429:
		p.release(req.key)
		p.st.rateLimited.Add(1)
		if p.cfg.RetryAfterSeconds >= 0 {
			p.ra.give(req.key, time.Now(), time.Duration(p.cfg.RetryAfterSeconds)*time.Second)
			w.Header().Set("Retry-After", strconv.Itoa(p.cfg.RetryAfterSeconds))
		}
		writeProblem(w, http.StatusTooManyRequests, "injected failure (Fail429)")
	case fault529:
		p.finishFault(req.key, effectFirst)
		p.st.overloaded.Add(1)
		writeProblem(w, StatusOverloaded, "injected failure (Fail529)")
	case faultTimeout:
		p.sleep(ctx, p.cfg.TimeoutDelay)
		p.finishFault(req.key, effectFirst)
		p.st.timeouts.Add(1)
		writeProblem(w, http.StatusGatewayTimeout, "injected failure (Timeout)")
	case faultReset:
		p.st.resets.Add(1)
		abortConnection(w)
	}
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

// keyPrefix is the prefix of contract §1 keys, checked by Config.VerifyTuple.
const keyPrefix = "idem_v1_"

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
