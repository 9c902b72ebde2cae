// Package layout holds the checks the repository runs on its own Go
// source: no hand-written file over MaxFileLines lines, no function over
// MaxFuncLines (layout_test.go). It has no code of its own.
//
// # Files
//
//	doc.go          this map, and the limits
//	layout_test.go  TestFileAndFunctionSizes and its known exceptions
package layout

// The limits: past them a file or a function holds a second concern.
const (
	MaxFileLines = 500
	MaxFuncLines = 80
)
