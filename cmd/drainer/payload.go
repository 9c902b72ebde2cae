package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/producer"
)

// maxPayloadRead bounds what `enqueue --payload @FILE|-` reads: the producer
// refuses anything far above the limit anyway (the database enforces the
// configured one), so a huge file is refused without being held in memory.
const maxPayloadRead = 4*producer.DefaultMaxPayloadBytes + 1

// readPayload resolves --payload: "@FILE" reads the file, "-" reads stdin,
// anything else is the JSON itself. The payload must be valid JSON in
// UTF-8; an error names the source and, for invalid JSON or UTF-8, the
// line, column (and byte offset) of the first problem.
func readPayload(arg string, stdin io.Reader) ([]byte, error) {
	p, err := loadPayload(arg, stdin)
	return p.json, err
}

// readJSONBPayload is readPayload for a payload stored as jsonb (enqueue):
// it also refuses what PostgreSQL's jsonb cannot store, before anything is
// sent to the database.
func readJSONBPayload(arg string, stdin io.Reader) ([]byte, error) {
	p, err := loadPayload(arg, stdin)
	if err != nil {
		return nil, err
	}
	return p.json, p.checkJSONB()
}

// payloadText is a payload read for --payload: json is the value (blanks
// around it trimmed), what names the flag and the source in errors, and
// full and lead place an offset of json in what was read (at reports it).
type payloadText struct {
	json, full []byte
	lead       int
	what       string
}

// at renders the offset off of p.json as "line L, column C" of what was read.
func (p payloadText) at(off int64) string { return position(p.full, int64(p.lead)+off) }

// loadPayload reads and checks --payload (see readPayload).
func loadPayload(arg string, stdin io.Reader) (payloadText, error) {
	var (
		data []byte
		src  string
		err  error
	)
	switch {
	case arg == "-":
		src = "standard input"
		data, err = readBounded(stdin)
		if err != nil {
			return payloadText{}, fmt.Errorf("--payload -: read standard input: %w", err)
		}
	case strings.HasPrefix(arg, "@"):
		name := arg[1:]
		if name == "" {
			return payloadText{}, usagef("--payload @: name a file after @ (e.g. --payload @payload.json), or - for standard input")
		}
		src = name
		f, err := os.Open(name)
		if err != nil {
			return payloadText{}, usagef("--payload @%s: %w", name, unwrapPathError(err))
		}
		defer f.Close()
		data, err = readBounded(f)
		if err != nil {
			return payloadText{}, usagef("--payload @%s: read: %w", name, unwrapPathError(err))
		}
	default:
		p := payloadText{json: []byte(arg), full: []byte(arg), what: "--payload: payload"}
		return p, p.check()
	}
	if len(data) > maxPayloadRead-1 {
		return payloadText{}, usagef("--payload: payload from %s is more than %d bytes, far above the limit", src, maxPayloadRead-1)
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return payloadText{}, usagef("--payload: payload from %s is empty (use {} for none)", src)
	}
	p := payloadText{json: trimmed, full: data, lead: len(data) - len(bytes.TrimLeftFunc(data, unicode.IsSpace)),
		what: "--payload: payload from " + src}
	return p, p.check()
}

// readBounded reads r up to maxPayloadRead bytes.
func readBounded(r io.Reader) ([]byte, error) {
	return io.ReadAll(io.LimitReader(r, maxPayloadRead))
}

// unwrapPathError drops the op and path of a *os.PathError: the caller
// already names the file.
func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// check reports whether p is valid UTF-8 and one valid JSON value; an
// error names what (the flag and the payload's source) and the position of
// the first problem.
func (p payloadText) check() error {
	data := p.json
	if len(data) == 0 {
		return nil // producer.Intent.Validate names the empty payload
	}
	// JSON is UTF-8 (RFC 8259); encoding/json would pass a bad byte on
	// (as U+FFFD), the database refuses it.
	if off := invalidUTF8(data); off >= 0 {
		return usagef("%s is not valid UTF-8: byte 0x%02x at byte offset %d (%s)",
			p.what, data[off], p.lead+off, p.at(int64(off)))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var v json.RawMessage
	err := dec.Decode(&v)
	if err == nil {
		off := dec.InputOffset()
		if _, extra := dec.Token(); extra != io.EOF {
			for off < int64(len(data)) && strings.ContainsRune(" \t\r\n", rune(data[off])) {
				off++
			}
			return usagef("%s is not valid JSON: %s: more data after the first JSON value", p.what, p.at(off))
		}
		return nil
	}
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return usagef("%s is not valid JSON: %s: %v", p.what, p.at(se.Offset-1), se)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return usagef("%s is not valid JSON: %s: unexpected end of input", p.what, p.at(int64(len(data))))
	}
	return usagef("%s is not valid JSON: %v", p.what, err)
}

// invalidUTF8 returns the offset of the first byte of data that is not
// valid UTF-8, or -1.
func invalidUTF8(data []byte) int {
	for off := 0; off < len(data); {
		r, n := utf8.DecodeRune(data[off:])
		if r == utf8.RuneError && n <= 1 {
			return off
		}
		off += n
	}
	return -1
}

// checkJSONB refuses a payload (already checked valid JSON) that
// PostgreSQL's jsonb cannot store: a string (or member name) holding NUL,
// written \u0000, or a UTF-16 surrogate escape without its other half.
func (p payloadText) checkJSONB() error {
	if off, why := dispatch.JSONBRefused(p.json); off >= 0 {
		return usagef("%s contains %s at %s, which PostgreSQL's jsonb cannot store", p.what, why, p.at(int64(off)))
	}
	return nil
}

// position renders the byte offset off of data as "line L, column C",
// 1-based, columns counted in bytes.
func position(data []byte, off int64) string {
	off = min(max(off, 0), int64(len(data)))
	before := data[:off]
	line := bytes.Count(before, []byte("\n")) + 1
	col := len(before) - bytes.LastIndexByte(before, '\n')
	return fmt.Sprintf("line %d, column %d", line, col)
}
