package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/drainer-io/drainer/producer"
)

// maxPayloadRead bounds what `enqueue --payload @FILE|-` reads: the producer
// refuses anything far above the limit anyway (the database enforces the
// configured one), so a huge file is refused without being held in memory.
const maxPayloadRead = 4*producer.DefaultMaxPayloadBytes + 1

// readPayload resolves --payload: "@FILE" reads the file, "-" reads stdin,
// anything else is the JSON itself. The payload must be valid JSON; an error
// names the source and, for invalid JSON, the line, column and byte offset.
func readPayload(arg string, stdin io.Reader) ([]byte, error) {
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
			return nil, fmt.Errorf("--payload -: read standard input: %w", err)
		}
	case strings.HasPrefix(arg, "@"):
		name := arg[1:]
		if name == "" {
			return nil, usagef("--payload @: name a file after @ (e.g. --payload @payload.json), or - for standard input")
		}
		src = name
		f, err := os.Open(name)
		if err != nil {
			return nil, usagef("--payload @%s: %w", name, unwrapPathError(err))
		}
		defer f.Close()
		data, err = readBounded(f)
		if err != nil {
			return nil, usagef("--payload @%s: read: %w", name, unwrapPathError(err))
		}
	default:
		return []byte(arg), checkJSON("--payload: payload", []byte(arg))
	}
	if len(data) > maxPayloadRead-1 {
		return nil, usagef("--payload: payload from %s is more than %d bytes, far above the limit", src, maxPayloadRead-1)
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, usagef("--payload: payload from %s is empty (use {} for none)", src)
	}
	return data, checkJSON("--payload: payload from "+src, data)
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

// checkJSON reports whether data is one valid JSON value; an error names
// what (the flag and the payload's source) and the position of the first
// problem.
func checkJSON(what string, data []byte) error {
	if len(data) == 0 {
		return nil // producer.Intent.Validate names the empty payload
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
			return usagef("%s is not valid JSON: %s: more data after the first JSON value", what, position(data, off))
		}
		return nil
	}
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return usagef("%s is not valid JSON: %s: %v", what, position(data, se.Offset-1), se)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return usagef("%s is not valid JSON: %s: unexpected end of input", what, position(data, int64(len(data))))
	}
	return usagef("%s is not valid JSON: %v", what, err)
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
