package config

import (
	"strings"

	"github.com/goccy/go-yaml/ast"
)

// Walking goccy/go-yaml's syntax tree: anchors, aliases, merge keys, and
// the positions, text and kind of nodes.

// position returns the 1-based line and column where a node is written. A
// block mapping is located at its first key (goccy places it at the colon).
func position(n ast.Node) (line, col int) {
	switch v := n.(type) {
	case nil:
		return 0, 0
	case *ast.MappingNode:
		if !v.IsFlowStyle && len(v.Values) > 0 {
			return position(v.Values[0].Key)
		}
	case *ast.MappingValueNode:
		return position(v.Key)
	case *ast.MappingKeyNode:
		return position(v.Value)
	case *ast.LiteralNode:
		if v.Start != nil && v.Start.Position != nil {
			return v.Start.Position.Line, v.Start.Position.Column
		}
	}
	tk := n.GetToken()
	if tk == nil || tk.Position == nil {
		return 0, 0
	}
	return tk.Position.Line, tk.Position.Column
}

// scalarText returns a scalar's text: the unquoted value of a string, the
// literal text of a number or boolean. ok is false for collections.
// isString reports a YAML string (the only kind ${…} references expand in).
func scalarText(n ast.Node) (text string, isString, ok bool) {
	switch v := n.(type) {
	case *ast.StringNode:
		return v.Value, true, true
	case *ast.LiteralNode:
		if v.Value == nil {
			return "", true, true
		}
		return v.Value.Value, true, true
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.InfinityNode, *ast.NanNode, *ast.NullNode:
		if tk := n.GetToken(); tk != nil {
			return tk.Value, false, true
		}
		return "", false, true
	}
	return "", false, false
}

// kindOf names a node's kind for "must be X, got Y" messages.
func kindOf(n ast.Node) string {
	switch n.(type) {
	case *ast.MappingNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	case *ast.StringNode, *ast.LiteralNode:
		return "a string"
	case *ast.IntegerNode, *ast.FloatNode, *ast.InfinityNode, *ast.NanNode:
		return "a number"
	case *ast.BoolNode:
		return "a boolean"
	case *ast.NullNode:
		return "null"
	}
	return "an unsupported YAML node"
}

// anchor is a node defined with &name, which *name aliases refer to.
type anchor struct {
	name   string
	offset int
	value  ast.Node
}

// collectAnchors records every anchor of the document, so that an alias
// can be resolved wherever it appears.
func (d *decoder) collectAnchors(body ast.Node) {
	for _, n := range ast.Filter(ast.AnchorType, body) {
		a, ok := n.(*ast.AnchorNode)
		if !ok || a.Name == nil || a.Name.GetToken() == nil || a.Start == nil || a.Start.Position == nil {
			continue
		}
		d.anchors = append(d.anchors, anchor{name: a.Name.GetToken().Value, offset: a.Start.Position.Offset, value: a.Value})
	}
}

// resolve follows anchors, aliases and standard (!!) tags to the node that
// holds the value. It returns nil after reporting an error.
func (d *decoder) resolve(n ast.Node, field string) ast.Node {
	for range 32 {
		switch v := n.(type) {
		case *ast.AnchorNode:
			n = v.Value
		case *ast.AliasNode:
			target := d.anchorFor(v)
			if target == nil {
				line, col := position(v)
				d.errorAt(line, col, field, "unknown alias %s", v.String())
				return nil
			}
			n = target
		case *ast.TagNode:
			tag := ""
			if v.Start != nil {
				tag = v.Start.Value
			}
			if !strings.HasPrefix(tag, "!!") {
				line, col := position(v)
				d.errorAt(line, col, field, "unsupported YAML tag %s", tag)
				return nil
			}
			n = v.Value
		default:
			return n
		}
	}
	line, col := position(n)
	d.errorAt(line, col, field, "aliases nest too deep")
	return nil
}

// anchorFor finds the anchor an alias refers to: the last one of that name
// defined before the alias.
func (d *decoder) anchorFor(a *ast.AliasNode) ast.Node {
	if a.Value == nil || a.Value.GetToken() == nil || a.Start == nil || a.Start.Position == nil {
		return nil
	}
	name, at := a.Value.GetToken().Value, a.Start.Position.Offset
	var found ast.Node
	for _, an := range d.anchors {
		if an.name == name && an.offset < at {
			found = an.value
		}
	}
	return found
}

// entry is one key/value pair of a mapping, after merge keys are applied.
type entry struct {
	key     string
	keyNode ast.Node
	value   ast.Node
}

// entries lists a mapping's pairs. Merge keys (<<: *anchor) contribute the
// pairs of the merged mappings; a key written in the mapping itself wins,
// then earlier merged mappings win over later ones.
func (d *decoder) entries(m *ast.MappingNode, field string, depth int) []entry {
	var own, merged []entry
	for _, mv := range m.Values {
		if mv == nil {
			continue
		}
		if _, ok := mv.Key.(*ast.MergeKeyNode); ok {
			merged = append(merged, d.mergeEntries(mv.Value, field, depth)...)
			continue
		}
		var key ast.Node = mv.Key
		if k, ok := key.(*ast.MappingKeyNode); ok {
			key = k.Value
		}
		key = d.resolve(key, field)
		if key == nil {
			continue
		}
		text, _, ok := scalarText(key)
		if !ok {
			line, col := position(key)
			d.errorAt(line, col, field, "keys must be strings, got %s", kindOf(key))
			continue
		}
		own = append(own, entry{key: text, keyNode: key, value: mv.Value})
	}
	seen := make(map[string]bool, len(own))
	for _, e := range own {
		seen[e.key] = true
	}
	for _, e := range merged {
		if !seen[e.key] {
			seen[e.key] = true
			own = append(own, e)
		}
	}
	return own
}

// mergeEntries returns the pairs a merge key's value contributes.
func (d *decoder) mergeEntries(value ast.Node, field string, depth int) []entry {
	n := d.resolve(value, field)
	if n == nil {
		return nil
	}
	sources := []ast.Node{n}
	if seq, ok := n.(*ast.SequenceNode); ok {
		sources = seq.Values
	}
	var out []entry
	for _, s := range sources {
		r := d.resolve(s, field)
		if r == nil {
			continue
		}
		line, col := position(s)
		m, ok := r.(*ast.MappingNode)
		switch {
		case !ok:
			d.errorAt(line, col, field, "<< must merge a mapping or a list of mappings")
			continue
		case depth >= 8:
			d.errorAt(line, col, field, "merge keys nest too deep (does a mapping merge itself?)")
			d.failed = true
			return nil
		case d.budget < len(m.Values):
			d.errorAt(line, col, field, "the config expands to more than %d values through aliases", decodeBudget)
			d.failed = true
			return nil
		}
		d.budget -= len(m.Values)
		out = append(out, d.entries(m, field, depth+1)...)
	}
	return out
}
