package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
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

// segment is a piece of a string value as written: literal text or a
// reference.
type segment struct {
	// text is the literal text, or the reference as written (${env:X}).
	text string
	// scheme is "env" or "file" for a reference, "" for literal text.
	scheme string
	// arg is the variable name or the file path of a reference.
	arg string
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// splitReferences cuts a value as written into literal text and references.
// Its error messages quote at most the reference text, never literal text
// (which may be a secret written inline by mistake).
func splitReferences(s string) ([]segment, error) {
	var segs []segment
	var lit strings.Builder
	for len(s) > 0 {
		i := strings.IndexByte(s, '$')
		if i < 0 {
			lit.WriteString(s)
			break
		}
		lit.WriteString(s[:i])
		s = s[i:]
		switch {
		case strings.HasPrefix(s, "$${"):
			lit.WriteString("${")
			s = s[3:]
			continue
		case !strings.HasPrefix(s, "${"):
			lit.WriteByte('$')
			s = s[1:]
			continue
		}
		end := strings.IndexByte(s, '}')
		if end < 0 {
			return nil, errors.New(`unterminated "${" (a reference ends with "}"; write "$${" for a literal "${")`)
		}
		ref := s[:end+1]
		scheme, arg, ok := strings.Cut(s[2:end], ":")
		switch {
		case !ok:
			return nil, fmt.Errorf("reference %s has no scheme; use ${env:NAME} or ${file:/path}", ref)
		case scheme == "env" && !envName.MatchString(arg):
			return nil, fmt.Errorf("invalid environment variable name in %s", ref)
		case scheme == "file" && !filepath.IsAbs(arg):
			return nil, fmt.Errorf("%s must name an absolute path", ref)
		case scheme != "env" && scheme != "file":
			return nil, fmt.Errorf("unknown reference scheme %q in %s; use ${env:NAME} or ${file:/path}", scheme, ref)
		}
		if lit.Len() > 0 {
			segs = append(segs, segment{text: lit.String()})
			lit.Reset()
		}
		segs = append(segs, segment{text: ref, scheme: scheme, arg: arg})
		s = s[end+1:]
	}
	if lit.Len() > 0 {
		segs = append(segs, segment{text: lit.String()})
	}
	return segs, nil
}

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
		if s.scheme == "" {
			b.WriteString(s.text)
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
func (x *expander) resolve(s segment) (string, string) {
	if s.scheme == "env" {
		v, ok := x.opts.LookupEnv(s.arg)
		if !ok {
			return "", fmt.Sprintf("environment variable %s is not set (%s)", s.arg, s.text)
		}
		return v, ""
	}
	r, ok := x.files[s.arg]
	if !ok {
		data, err := x.opts.ReadFile(s.arg)
		r = fileResult{content: trimNewline(string(data)), err: err}
		if x.files == nil {
			x.files = make(map[string]fileResult)
		}
		x.files[s.arg] = r
	}
	if r.err != nil {
		return "", fmt.Sprintf("cannot read %s: %s", s.text, describeReadError(r.err))
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
