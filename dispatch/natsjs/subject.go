package natsjs

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// toolNameVar is the only template variable of Config.Subject.
const toolNameVar = "{tool_name}"

// subject is a parsed subject template.
type subject struct {
	// parts is the template split around {tool_name}: one part when the
	// template has no variable.
	parts []string
}

// parseSubject checks a subject template: dot-separated tokens, none empty,
// none a wildcard, no whitespace, and {tool_name}, if present, only as a
// whole token. Its errors quote the template (subjects are not secret).
func parseSubject(tmpl string) (subject, error) {
	if tmpl == "" {
		return subject{}, errors.New("required")
	}
	for _, tok := range strings.Split(tmpl, ".") {
		if tok == toolNameVar {
			continue
		}
		if strings.Contains(tok, "{") || strings.Contains(tok, "}") {
			return subject{}, fmt.Errorf("%q: {tool_name} is the only variable and must be a whole token (a.{tool_name}.b)", tmpl)
		}
		if err := checkToken(tok); err != nil {
			return subject{}, fmt.Errorf("%q: %w", tmpl, err)
		}
	}
	return subject{parts: strings.Split(tmpl, toolNameVar)}, nil
}

// templated reports whether the subject depends on the tool name.
func (s subject) templated() bool { return len(s.parts) > 1 }

// expand returns the subject for a tool name, or an error if the tool name
// is not a valid subject token.
func (s subject) expand(toolName string) (string, error) {
	if !s.templated() {
		return s.parts[0], nil
	}
	if err := checkToken(toolName); err != nil {
		return "", fmt.Errorf("tool name is not a valid subject token: %w", err)
	}
	return strings.Join(s.parts, toolName), nil
}

// filter returns the subject with {tool_name} as a wildcard: the subjects
// the adapter may publish to, for looking up the streams that capture them.
func (s subject) filter() string { return strings.Join(s.parts, "*") }

// checkToken checks one subject token.
func checkToken(tok string) error {
	switch {
	case tok == "":
		return errors.New("empty token (leading, trailing or double dot)")
	case tok == "*" || tok == ">":
		return errors.New("wildcards cannot be published to")
	case strings.Contains(tok, "."):
		return errors.New("contains '.'")
	case strings.ContainsFunc(tok, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) || r == unicode.ReplacementChar }):
		return errors.New("contains whitespace, a control character or invalid UTF-8")
	}
	return nil
}
