package kafka

import (
	"errors"
	"fmt"
	"strings"
)

// ToolNameVar is the only template variable of a topic.
const ToolNameVar = "{tool_name}"

// MaxTopicLen is the longest topic name Kafka accepts.
const MaxTopicLen = 249

// Topic is a parsed topic template: a fixed name, or a name with
// {tool_name} in it, expanded per row.
type Topic struct {
	// parts is the template split around {tool_name}: one part when the
	// template has no variable.
	parts []string
}

// ParseTopic checks a topic template: {tool_name} is its only variable,
// and its fixed text must be made of the characters Kafka allows in a topic
// name. A fixed name is checked in full (CheckTopicName). Errors quote the
// template (topic names are not secret).
func ParseTopic(tmpl string) (Topic, error) {
	if tmpl == "" {
		return Topic{}, errors.New("required: a topic name, or a template with {tool_name}")
	}
	if strings.ContainsAny(strings.ReplaceAll(tmpl, ToolNameVar, ""), "{}") {
		return Topic{}, fmt.Errorf("%q: {tool_name} is the only variable of a topic", tmpl)
	}
	parts := strings.Split(tmpl, ToolNameVar)
	if len(parts) == 1 {
		if err := CheckTopicName(tmpl); err != nil {
			return Topic{}, err
		}
		return Topic{parts: parts}, nil
	}
	fixed := 0
	for _, p := range parts {
		if i := strings.IndexFunc(p, func(r rune) bool { return !topicRune(r) }); i >= 0 {
			return Topic{}, fmt.Errorf("%q: %q is not allowed in a topic name (letters, digits, '.', '_' and '-' only)", tmpl, p[i:i+1])
		}
		fixed += len(p)
	}
	if fixed >= MaxTopicLen {
		return Topic{}, fmt.Errorf("%q: its fixed text is %d characters, leaving no room for the tool name in a topic of at most %d", tmpl, fixed, MaxTopicLen)
	}
	return Topic{parts: parts}, nil
}

// Templated reports whether the topic depends on the tool name.
func (t Topic) Templated() bool { return len(t.parts) > 1 }

// String returns the template.
func (t Topic) String() string { return strings.Join(t.parts, ToolNameVar) }

// Expand returns the topic of a row with this tool name, or an error naming
// the resulting topic when it is not a valid topic name.
func (t Topic) Expand(toolName string) (string, error) {
	if !t.Templated() {
		return t.parts[0], nil
	}
	name := strings.Join(t.parts, toolName)
	if err := CheckTopicName(name); err != nil {
		return "", fmt.Errorf("topic %s for tool %q: %w", t.String(), clip(toolName), err)
	}
	return name, nil
}

// CheckTopicName checks a topic name as Kafka does: 1 to 249 characters
// among letters, digits, '.', '_' and '-', and neither "." nor "..". The
// error quotes the name, cut to a readable length.
func CheckTopicName(name string) error {
	switch {
	case name == "":
		return errors.New("a topic name cannot be empty")
	case name == "." || name == "..":
		return fmt.Errorf("%q is not a valid topic name", name)
	case len(name) > MaxTopicLen:
		return fmt.Errorf("topic name %q is %d characters long, more than Kafka's %d", clip(name), len(name), MaxTopicLen)
	}
	for i, r := range name {
		if !topicRune(r) {
			return fmt.Errorf("topic name %q holds %q at byte %d (letters, digits, '.', '_' and '-' only)", clip(name), r, i)
		}
	}
	return nil
}

func topicRune(r rune) bool {
	return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '.' || r == '_' || r == '-'
}

// clip cuts s for a message.
func clip(s string) string {
	const limit = 80
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "…"
}
