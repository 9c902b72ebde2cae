package mockprovider

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
)

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
