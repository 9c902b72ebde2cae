package receiver

import (
	"encoding/json"
	"net/http"
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

// writeProblem answers a problem with extra headers.
func writeProblem(w http.ResponseWriter, status int, slug, title, detail string, extra http.Header) {
	p := newProblem(status, slug, title, detail)
	p.extra = extra
	p.write(w)
}
