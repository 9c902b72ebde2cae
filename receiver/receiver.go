package receiver

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// Headers the receiver reads and writes (docs/reference.md §11).
const (
	HeaderTuple         = "X-Agent-Idempotency-Tuple"
	HeaderReplay        = "Idempotency-Replay"
	HeaderReplayed      = "Idempotent-Replayed"
	HeaderConflict      = "Idempotency-Conflict"
	conflictPayload     = "payload-mismatch"
	conflictInFlight    = "in-flight"
	conflictUnknown     = "outcome-unknown"
	retryAfterSeconds   = "1"
	completionTimeout   = 30 * time.Second
	problemContentType  = "application/problem+json"
	headerRetryAfter    = "Retry-After"
	headerContentType   = "Content-Type"
	headerContentLength = "Content-Length"
	replayTrue          = "true"
	replayFalse         = "false"
)

// Receiver makes an HTTP handler answer retries of one idempotency key the
// way drainer expects: one effect, byte-identical replays.
type Receiver struct {
	pool      *pgxpool.Pool
	opts      Options
	schema    string // quoted identifier
	table     string // quoted schema.records
	claimSQL  string // claimSQL on table
	beginSQL  string // begins an InTransaction request's transaction
	abandoned *prometheus.CounterVec
	// withTimeout bounds a store step (context.WithTimeout); tests replace
	// it to make a bound lapse at a moment of their choosing.
	withTimeout func(context.Context, time.Duration) (context.Context, context.CancelFunc)
}

// New returns a Receiver storing its records through pool. It does not touch
// the database: call Migrate once (at startup) to create the store.
func New(pool *pgxpool.Pool, opts Options) (*Receiver, error) {
	if pool == nil {
		return nil, errors.New("receiver: New needs a connection pool, got nil")
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	abandoned, err := newAbandonedCounter(o.Registerer)
	if err != nil {
		return nil, fmt.Errorf("receiver: option Registerer: %w", err)
	}
	schema := pgx.Identifier{o.Schema}.Sanitize()
	table := schema + ".records"
	return &Receiver{pool: pool, opts: o, schema: schema, table: table, claimSQL: fmt.Sprintf(claimSQL, table),
		beginSQL: beginSQL(o.IdleInTransactionTimeout), abandoned: abandoned, withTimeout: context.WithTimeout}, nil
}

// txKey is the context key of the InTransaction transaction.
type txKey struct{}

// Tx returns the transaction a keyed request's handler runs in when the
// Receiver has Options.InTransaction set, or nil. Whatever the handler
// writes through it commits together with the record and its stored
// answer; the handler must not commit or roll it back itself.
func Tx(ctx context.Context) pgx.Tx {
	tx, _ := ctx.Value(txKey{}).(pgx.Tx)
	return tx
}

// Wrap returns next behind the receiver. Requests that need no key (see
// Options.RequireKey) go straight to next.
func (rc *Receiver) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !rc.opts.RequireKey(r) {
			next.ServeHTTP(w, r)
			return
		}
		rc.serve(w, r, next)
	})
}

// serve runs the request flow of docs/receiver.md for a request that needs a key.
func (rc *Receiver) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	// 1. Checks that store nothing: body size, key, tuple.
	scope, key, fp, ok := rc.admit(w, r)
	if !ok {
		return
	}

	if rc.opts.InTransaction {
		rc.serveInTransaction(w, r, next, scope, key, fp)
		return
	}

	// 2. Claim the record.
	res, err := rc.claim(r.Context(), scope, key, fp)
	if err != nil {
		rc.logFailure("claim failed; answered 503", scope, err)
		rc.writeStoreFailure(w, err, false,
			"the idempotency store could not be reached; the request was not processed, retry it with the same key")
		return
	}
	if res.abandoned {
		rc.reportAbandoned(scope, key, res.outcome == claimed)
	}
	if rc.refuse(w, key, res) {
		return
	}

	// 3-4. Run the handler and store its answer. The key is this
	// request's now: nothing from here on follows a client that hangs up.
	r = detach(r)
	rec := newRecorder()
	l := &lease{token: res.token}
	stop := rc.keepAlive(r.Context(), scope, key, l)
	rc.runHandler(next, rec, r, func() {
		stop()
		rc.releaseQuietly(r.Context(), scope, key, l.get())
	})
	stop()
	token := l.get()
	a := rec.answer(rc.opts.StoreHeaders)
	ctx, cancel := rc.storeContext(r.Context())
	defer cancel()
	if a.status >= 500 && !rc.opts.StoreServerErrors {
		if err := rc.release(ctx, scope, key, token); err != nil {
			rc.logFailure("releasing the record after a 5xx failed; it blocks retries until the recovery timeout", scope, err)
		}
	} else {
		// If this fails the answer still goes out (the effect happened);
		// the record stays in flight, and after the recovery timeout a
		// retry finds it abandoned.
		switch ok, err := rc.complete(ctx, rc.pool, scope, key, token, a); {
		case err != nil:
			rc.logFailure("storing the answer failed; after the recovery timeout a retry finds the record abandoned", scope, err)
		case !ok:
			rc.logFailure("the answer was not stored: the record is no longer this request's (its recovery deadline "+
				"lapsed, as it could not be moved forward, e.g. with the database out of reach, and a retry took it over; or it was deleted)", scope, nil)
		}
	}
	rec.flush(w)
}

// admit runs the checks that store nothing (body size, key, tuple, scope)
// and returns the request's scope, key and fingerprint, or answers the
// request and reports false. The body read is put back for the handler.
func (rc *Receiver) admit(w http.ResponseWriter, r *http.Request) (string, string, []byte, bool) {
	if r.ContentLength > rc.opts.MaxBody {
		rc.tooLarge(w)
		return "", "", nil, false
	}
	body, err := readBody(w, r, rc.opts.MaxBody)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			rc.tooLarge(w)
			return "", "", nil, false
		}
		writeProblem(w, http.StatusBadRequest, "unreadable-body", "Request body unreadable",
			"the request body could not be read completely", nil)
		return "", "", nil, false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))

	key, prob := rc.requestKey(r)
	if prob != nil {
		prob.write(w)
		return "", "", nil, false
	}
	scope := rc.opts.Scope(r)
	if !utf8.ValidString(scope) || bytes.IndexByte([]byte(scope), 0) >= 0 {
		writeProblem(w, http.StatusBadRequest, "invalid-scope", "Invalid scope",
			"the request's scope is not valid UTF-8 or contains a NUL byte", nil)
		return "", "", nil, false
	}
	fp := Fingerprint(r.Method, requestPath(r), r.Header.Get(headerContentType), body)
	return scope, key, fp[:], true
}

// refuse answers a request whose claim did not give it the record (a
// replay, a conflict) and reports true, or reports false for a claimed one.
func (rc *Receiver) refuse(w http.ResponseWriter, key string, res claimResult) bool {
	switch res.outcome {
	case replay:
		rc.replay(w, res.answer)
	case mismatch:
		status := http.StatusConflict
		if rc.opts.Mode == ModeIETF {
			status = http.StatusUnprocessableEntity
		}
		writeProblem(w, status, conflictPayload, "Idempotency key reused with a different request",
			"this key was first used with another method, path or body; use a new key for a new request",
			http.Header{HeaderConflict: {conflictPayload}})
	case inFlight:
		writeProblem(w, http.StatusConflict, conflictInFlight, "Request with this key in flight",
			"a request with this key is still being processed; retry later with the same key",
			http.Header{HeaderConflict: {conflictInFlight}, headerRetryAfter: {retryAfterSeconds}})
	case outcomeUnknown:
		p := newProblem(http.StatusConflict, conflictUnknown, "Outcome of the request with this key unknown",
			"the first request with idempotency key "+key+" stopped before its answer was stored, and its effect may "+
				"exist; it is not run again: the key is held until the provider resolves it")
		p.Key = key
		p.extra = http.Header{HeaderConflict: {conflictUnknown}}
		p.write(w)
	default:
		return false
	}
	return true
}

// detach returns r with a context that keeps r's values (trace spans, the
// caller's identity) but is not cancelled when the client goes away: once
// a request has claimed its key, its handler and the receiver's own
// statements run to the end, so the effect and its answer are committed
// and a retry gets the replay, however soon the caller hung up.
func detach(r *http.Request) *http.Request {
	return r.WithContext(context.WithoutCancel(r.Context()))
}

// runHandler calls next; if it panics, onPanic releases the record and the
// panic goes on to the server.
func (rc *Receiver) runHandler(next http.Handler, w http.ResponseWriter, r *http.Request, onPanic func()) {
	defer func() {
		if v := recover(); v != nil {
			onPanic()
			panic(v)
		}
	}()
	next.ServeHTTP(w, r)
}

// storeContext bounds a store step that follows the handler (storing its
// answer, releasing its record, committing): completionTimeout from now,
// however long the handler ran, and not cut short by a client that left.
func (rc *Receiver) storeContext(parent context.Context) (context.Context, context.CancelFunc) {
	return rc.withTimeout(context.WithoutCancel(parent), completionTimeout)
}

func (rc *Receiver) releaseQuietly(ctx context.Context, scope, key string, token time.Time) {
	ctx, cancel := rc.storeContext(ctx)
	defer cancel()
	if err := rc.release(ctx, scope, key, token); err != nil {
		rc.logFailure("releasing the record failed; it blocks retries until the recovery timeout", scope, err)
	}
}

// logFailure logs a store failure with the scope (never the key or payload).
func (rc *Receiver) logFailure(msg, scope string, err error) {
	attrs := []any{slog.String("schema", rc.opts.Schema), slog.String("scope", scope)}
	if err != nil {
		attrs = append(attrs, slog.Any("error", err))
	}
	rc.opts.Logger.Warn("receiver: "+msg, attrs...)
}

// replay writes a stored answer.
func (rc *Receiver) replay(w http.ResponseWriter, a stored) {
	h := w.Header()
	for name, vs := range a.headers {
		h[http.CanonicalHeaderKey(name)] = vs
	}
	h.Set(HeaderReplay, replayTrue)
	h.Set(HeaderReplayed, replayTrue)
	h.Set(headerContentLength, strconv.Itoa(len(a.body)))
	status := a.status
	if rc.opts.Mode == ModeSeed && status == http.StatusCreated {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = w.Write(a.body)
}

func (rc *Receiver) tooLarge(w http.ResponseWriter) {
	writeProblem(w, http.StatusRequestEntityTooLarge, "too-large", "Request body too large",
		fmt.Sprintf("the request body is larger than the limit of %d bytes", rc.opts.MaxBody), nil)
}

// requestKey returns the request's key, checked, and its tuple verified.
func (rc *Receiver) requestKey(r *http.Request) (string, *problem) {
	vals := r.Header.Values(rc.opts.KeyHeader)
	if len(vals) == 0 || (len(vals) == 1 && vals[0] == "") {
		return "", newProblem(http.StatusBadRequest, "missing-key", "Idempotency key missing",
			fmt.Sprintf("this request needs an idempotency key in header %s", rc.opts.KeyHeader))
	}
	if len(vals) > 1 {
		return "", newProblem(http.StatusBadRequest, "invalid-key", "Invalid idempotency key",
			fmt.Sprintf("header %s appears %d times; send it once", rc.opts.KeyHeader, len(vals)))
	}
	key := vals[0]
	if why := CheckKey(key); why != "" {
		return "", newProblem(http.StatusBadRequest, "invalid-key", "Invalid idempotency key",
			fmt.Sprintf("header %s: %s", rc.opts.KeyHeader, why))
	}
	if tv := r.Header.Values(HeaderTuple); len(tv) > 0 {
		if v, ok := keyVersion(key); ok && !strings.HasPrefix(key, idemkey.Prefix) {
			return "", newProblem(http.StatusBadRequest, "unsupported-key-version", "Unsupported idempotency key version",
				fmt.Sprintf("header %s: the key is of version %s (%s), which this receiver does not know: it checks %s "+
					"against keys of version %s (%s) only", rc.opts.KeyHeader, v, "idem_"+v+"_", HeaderTuple,
					strings.TrimSuffix(strings.TrimPrefix(idemkey.Prefix, "idem_"), "_"), idemkey.Prefix))
		}
		if why := checkTuple(tv, key); why != "" {
			return "", newProblem(http.StatusBadRequest, "tuple-mismatch", "Idempotency tuple does not match the key",
				fmt.Sprintf("header %s: %s", HeaderTuple, why))
		}
	}
	return key, nil
}

// CheckKey returns why key is not an acceptable idempotency key (1 to 255
// bytes of UTF-8 without control characters), or "".
func CheckKey(key string) string {
	switch {
	case key == "":
		return "the key is empty"
	case len(key) > MaxKeyBytes:
		return fmt.Sprintf("the key is %d bytes, more than the limit of %d", len(key), MaxKeyBytes)
	case !utf8.ValidString(key):
		return "the key is not valid UTF-8"
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c == 0x7f {
			return fmt.Sprintf("the key contains a control character at byte %d", i)
		}
	}
	return ""
}

// keyVersion returns the version of a key of drainer's scheme
// ("idem_v<digits>_…", docs/reference.md §1), e.g. "v1".
func keyVersion(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, "idem_v")
	if !ok {
		return "", false
	}
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	if n == 0 || n == len(rest) || rest[n] != '_' {
		return "", false
	}
	return "v" + rest[:n], true
}

// checkTuple decodes the tuple header and recomputes its key (docs/reference.md §1).
func checkTuple(vals []string, key string) string {
	if len(vals) > 1 {
		return fmt.Sprintf("the header appears %d times", len(vals))
	}
	raw, err := base64.RawURLEncoding.DecodeString(vals[0])
	if err != nil {
		return "not unpadded base64url"
	}
	var t idemkey.Tuple
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil || dec.More() {
		return "not the JSON object of the four tuple fields"
	}
	if t.Key() != key {
		return "the key recomputed from the tuple differs from the request's key"
	}
	return ""
}

// readBody reads the whole body, at most limit bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return []byte{}, nil
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if b == nil {
		b = []byte{}
	}
	return b, err
}

// requestPath is the request target's path as received, without the query.
func requestPath(r *http.Request) string {
	p := r.RequestURI
	if p == "" || p[0] != '/' {
		return r.URL.EscapedPath()
	}
	if i := bytes.IndexByte([]byte(p), '?'); i >= 0 {
		p = p[:i]
	}
	return p
}
