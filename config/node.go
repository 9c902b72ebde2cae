package config

import (
	"github.com/goccy/go-yaml/ast"
)

// Helpers over goccy/go-yaml AST nodes.

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
