package outbox_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/outbox"
)

// vocabularyFile is the one file of the repository that spells the
// vocabularies.
const vocabularyFile = "outbox/vocabulary.go"

// spellingExemption allows a word of the vocabulary in one file, where it
// means something else that happens to be spelt the same.
type spellingExemption struct {
	file  string // path from the repository's root
	words []string
	why   string
}

// spellingExemptions is every file outside vocabularyFile allowed to spell
// a word of the vocabulary. Each must still be needed: an exemption that
// matches nothing fails the test.
var spellingExemptions = []spellingExemption{
	{"config/validate.go", []string{"succeeded", "failed", "compensated", "cancelled"},
		"the keys of the config's retention: section, YAML field names"},
	{"dispatch/httpclass.go", []string{"cancelled"}, "dispatch.ReasonCancelled, a dispatch reason label"},
	{"dispatch/natsjs/classify.go", []string{"in_flight"}, "natsjs.ReasonInFlight, a dispatch reason label"},
	{"dispatch/kafka/classify.go", []string{"in_flight"}, "kafka.ReasonInFlight, a dispatch reason label"},
	{"receiver/store.go", []string{"in_flight", "outcome_unknown"},
		"the receiver's record states, in its own table of its own schema (drainer_receiver)"},
	{"receiver/metrics.go", []string{"outcome_unknown"}, "the receiver's abandoned-record label, its own record state"},
	{"tooling/bench/ceiling.go", []string{"pending", "in_flight", "succeeded"},
		"the ceiling's bare table, the bench's own minimal table (docs/reference.md §8), not drainer's"},
	{"tooling/bench/enqueue.go", []string{"pending", "forward"},
		"the insert shape, the bench's own table for the plain INSERT figure, not drainer's"},
}

// TestVocabularyIsSpeltOnce fails when a non-test Go file other than
// vocabularyFile spells a status as a string literal ("pending"), or a
// status, kind or saga state as a SQL literal inside one ('pending'):
// code names the constants, SQL text built in Go their SQL form (store's
// {StatusPending} placeholders).
func TestVocabularyIsSpeltOnce(t *testing.T) {
	var statuses, sqlWords []string
	for _, s := range outbox.Statuses {
		statuses = append(statuses, string(s))
		sqlWords = append(sqlWords, string(s))
	}
	sqlWords = append(sqlWords, string(outbox.KindForward), string(outbox.KindCompensation), string(outbox.SagaWaiting),
		string(outbox.SagaCompensating), string(outbox.SagaHalted), string(outbox.SagaDone))
	exempt := map[string]map[string]bool{}
	used := map[string]bool{}
	for _, e := range spellingExemptions {
		exempt[e.file] = map[string]bool{}
		for _, w := range e.words {
			exempt[e.file][w] = true
		}
	}
	for _, file := range goSources(t) {
		if file == vocabularyFile {
			continue
		}
		for _, lit := range stringLiterals(t, file) {
			var found []string
			if slices.Contains(statuses, lit.value) {
				found = append(found, lit.value)
			}
			for _, w := range sqlWords {
				if strings.Contains(lit.value, "'"+w+"'") && !slices.Contains(found, w) {
					found = append(found, w)
				}
			}
			for _, w := range found {
				if exempt[file][w] {
					used[file+" "+w] = true
					continue
				}
				t.Errorf("%s:%d: spells %q: name its outbox constant (or, in SQL built in Go, its SQL form)", file, lit.line, w)
			}
		}
	}
	for _, e := range spellingExemptions {
		for _, w := range e.words {
			if !used[e.file+" "+w] {
				t.Errorf("exemption of %q in %s is no longer needed: remove it", w, e.file)
			}
		}
	}
}

type literal struct {
	value string
	line  int
}

// stringLiterals returns the string literals of a Go file, other than
// import paths and struct tags.
func stringLiterals(t *testing.T, file string) []literal {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join(repoRoot, file), nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	skip := map[*ast.BasicLit]bool{}
	for _, imp := range f.Imports {
		skip[imp.Path] = true
	}
	var out []literal
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Field:
			if n.Tag != nil {
				skip[n.Tag] = true
			}
		case *ast.BasicLit:
			if n.Kind != token.STRING || skip[n] {
				return true
			}
			v, err := strconv.Unquote(n.Value)
			if err != nil {
				t.Fatalf("%s: %v", fset.Position(n.Pos()), err)
			}
			out = append(out, literal{v, fset.Position(n.Pos()).Line})
		}
		return true
	})
	return out
}

// repoRoot is the repository's root, from this package's directory.
const repoRoot = ".."

// goSources lists the repository's hand-written non-test Go files (paths
// from its root, with forward slashes): not under testdata/, not *_test.go,
// not *.pb.go, not marked "Code generated".
func goSources(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != repoRoot && (name == "testdata" || name == "node_modules" || name == "vendor" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") || strings.HasSuffix(name, ".pb.go") {
			return nil
		}
		rel, err := filepath.Rel(repoRoot, path)
		if err != nil {
			return err
		}
		if generated(t, path) {
			return nil
		}
		out = append(out, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 100 {
		t.Fatalf("found only %d Go files under %s: is it the repository's root?", len(out), repoRoot)
	}
	return out
}

// generated reports whether the Go file at path carries the standard
// "Code generated … DO NOT EDIT." line before its package clause.
func generated(t *testing.T, path string) bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.PackageClauseOnly|parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	return ast.IsGenerated(f)
}
