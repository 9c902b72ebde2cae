package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/drainer-io/drainer/dispatch/wire"
)

// References inside string values:
//
//	${env:NAME}     the environment variable NAME
//	${file:/path}   the file's content, one trailing newline trimmed
//	$${             a literal "${"
//
// A reference may be the whole value or part of it ("Bearer ${env:TOKEN}").
// Expansion is a single pass: an expanded value is never expanded again.

// maxFileReference bounds what a ${file:…} reference reads.
const maxFileReference = 1 << 20

// splitReferences cuts a value as written into literal text and references
// (wire.SplitReferences).
var splitReferences = wire.SplitReferences

// expander resolves references. It is used by one Parse call.
type expander struct {
	opts  LoadOptions
	files map[string]fileResult // ${file:…} reads, so a file is read once
}

type fileResult struct {
	content string
	err     error
}

// expansion is the outcome of expanding one value.
type expansion struct {
	value string
	// refs counts the references in the value.
	refs int
	// errs are problems that make the config invalid; warns are the same
	// problems in check mode, where they do not.
	errs, warns []string
}

// unresolved reports whether some reference could not be resolved: the
// value is then incomplete and not checked further.
func (e expansion) unresolved() bool { return len(e.errs) > 0 || len(e.warns) > 0 }

// expand resolves the references in raw. Messages name the reference, never
// a resolved value.
func (x *expander) expand(raw string) expansion {
	segs, err := splitReferences(raw)
	if err != nil {
		return expansion{errs: []string{err.Error()}}
	}
	var out expansion
	var b strings.Builder
	for _, s := range segs {
		if s.Scheme == "" {
			b.WriteString(s.Text)
			continue
		}
		out.refs++
		v, problem := x.resolve(s)
		if problem != "" {
			if x.opts.Check {
				out.warns = append(out.warns, problem)
			} else {
				out.errs = append(out.errs, problem)
			}
			continue
		}
		b.WriteString(v)
	}
	out.value = b.String()
	return out
}

// resolve returns a reference's value, or a message saying why there is none.
func (x *expander) resolve(s wire.Segment) (string, string) {
	if s.Scheme == "env" {
		v, ok := x.opts.LookupEnv(s.Arg)
		if !ok {
			return "", fmt.Sprintf("environment variable %s is not set (%s)", s.Arg, s.Text)
		}
		return v, ""
	}
	r, ok := x.files[s.Arg]
	if !ok {
		data, err := x.opts.ReadFile(s.Arg)
		r = fileResult{content: trimNewline(string(data)), err: err}
		if x.files == nil {
			x.files = make(map[string]fileResult)
		}
		x.files[s.Arg] = r
	}
	if r.err != nil {
		return "", fmt.Sprintf("cannot read %s: %s", s.Text, describeReadError(r.err))
	}
	return r.content, ""
}

// trimNewline drops one trailing newline (LF or CRLF), as editors and
// `echo` add one to secret files.
func trimNewline(s string) string {
	if t, ok := strings.CutSuffix(s, "\n"); ok {
		return strings.TrimSuffix(t, "\r")
	}
	return s
}

// describeReadError names why a file could not be read, without the path
// prefix of a *fs.PathError (the reference text already names the path).
func describeReadError(err error) string {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err.Error()
	}
	return err.Error()
}

// readFileLimited reads a whole file, refusing files above maxFileReference
// (a ${file:/dev/zero} must not exhaust memory).
func readFileLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileReference+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxFileReference {
		return nil, fmt.Errorf("file is larger than %d bytes", maxFileReference)
	}
	return data, nil
}
