package receiver

import (
	"bytes"
	"net/http"
	"strconv"
)

// recorder buffers the handler's answer so it can be stored before it is
// sent. It does not support Flush or Hijack: a keyed answer is sent whole.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func newRecorder() *recorder { return &recorder{header: http.Header{}} }

func (rec *recorder) Header() http.Header { return rec.header }

func (rec *recorder) WriteHeader(status int) {
	if rec.status == 0 && status >= 200 {
		rec.status = status
	}
}

func (rec *recorder) Write(p []byte) (int, error) {
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return rec.body.Write(p)
}

// answer returns the status, the headers to store (the names in keep) and
// the body. A missing Content-Type is sniffed as net/http would.
func (rec *recorder) answer(keep []string) stored {
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	if _, ok := rec.header[headerContentType]; !ok && rec.body.Len() > 0 {
		rec.header.Set(headerContentType, http.DetectContentType(rec.body.Bytes()))
	}
	h := http.Header{}
	for _, name := range keep {
		if vs, ok := rec.header[name]; ok {
			h[name] = append([]string(nil), vs...)
		}
	}
	body := rec.body.Bytes()
	if body == nil {
		body = []byte{}
	}
	return stored{status: rec.status, headers: h, body: body}
}

// flush sends the buffered answer of a first request, marked as no replay.
func (rec *recorder) flush(w http.ResponseWriter) {
	h := w.Header()
	for k, vs := range rec.header {
		h[k] = vs
	}
	h.Set(HeaderReplay, replayFalse)
	h.Set(headerContentLength, strconv.Itoa(rec.body.Len()))
	w.WriteHeader(rec.status)
	_, _ = w.Write(rec.body.Bytes())
}
