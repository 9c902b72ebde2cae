package receiver

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5/pgconn"
)

// problemTypeBase prefixes the type URI of every problem the receiver answers.
const problemTypeBase = "https://drainer.dev/problems/"

// problem is an RFC 9457 problem details answer.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	// Key names the idempotency key the problem is about, where a person
	// needs it (outcome-unknown).
	Key   string      `json:"idempotency_key,omitempty"`
	extra http.Header // headers sent with it
}

func newProblem(status int, slug, title, detail string) *problem {
	return &problem{Type: problemTypeBase + slug, Title: title, Status: status, Detail: detail}
}

func (p *problem) write(w http.ResponseWriter) {
	body, _ := json.Marshal(p)
	h := w.Header()
	for k, vs := range p.extra {
		h[k] = vs
	}
	h.Set(headerContentType, problemContentType)
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// writeUnavailable answers 503 with Retry-After: the store failed and
// nothing was done.
func writeUnavailable(w http.ResponseWriter, detail string) {
	writeProblem(w, http.StatusServiceUnavailable, "unavailable", "Idempotency store unavailable", detail,
		http.Header{headerRetryAfter: {retryAfterSeconds}})
}

// SQLSTATEs of a transaction the database aborted to keep concurrent
// transactions apart (under REPEATABLE READ or SERIALIZABLE, or a
// deadlock): nothing of it committed, and running it again is safe.
const (
	pgSerializationFailure = "40001"
	pgDeadlockDetected     = "40P01"
)

// writeStoreFailure answers 503 with Retry-After for a store step that
// failed with err, so drainer retries with the same key, naming the cause
// where it is known: a serialization failure or deadlock; or, when
// poolWait (the step was waiting for a connection of the pool when its
// bound lapsed, and the client had not gone) and every connection of the
// pool is in use, an exhausted pool. Otherwise detail says it.
func (rc *Receiver) writeStoreFailure(w http.ResponseWriter, err error, poolWait bool, detail string) {
	retry := http.Header{headerRetryAfter: {retryAfterSeconds}}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == pgSerializationFailure || pgErr.Code == pgDeadlockDetected) {
		what := "a serialization failure"
		if pgErr.Code == pgDeadlockDetected {
			what = "a deadlock"
		}
		writeProblem(w, http.StatusServiceUnavailable, "serialization-failure", "Transaction conflict",
			fmt.Sprintf("the database aborted the request's transaction with %s (SQLSTATE %s): it conflicted with a "+
				"concurrent transaction; nothing was committed, and it is safe to retry with the same key", what, pgErr.Code), retry)
		return
	}
	if poolWait && rc.poolExhausted() {
		size := rc.pool.Config().MaxConns
		writeProblem(w, http.StatusServiceUnavailable, "pool-exhausted", "No database connection free",
			fmt.Sprintf("timed out after %v waiting for a connection of the receiver's pool: all %d were in use (with "+
				"InTransaction each keyed request holds one for its whole handler; raise the pool's max_conns); "+
				"the request was not processed, retry it with the same key", completionTimeout, size), retry)
		return
	}
	writeUnavailable(w, detail)
}

// poolExhausted reports whether every connection of the pool is in use.
func (rc *Receiver) poolExhausted() bool {
	st := rc.pool.Stat()
	return st.AcquiredConns() >= st.MaxConns()
}

// writeProblem answers a problem with extra headers.
func writeProblem(w http.ResponseWriter, status int, slug, title, detail string, extra http.Header) {
	p := newProblem(status, slug, title, detail)
	p.extra = extra
	p.write(w)
}
