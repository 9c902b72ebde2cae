package layout

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// knownOversized lists the files (paths from the repository's root) that
// are allowed past the limits for now, each with why. A file listed that
// is within them fails the test, so the list only shrinks.
var knownOversized = map[string]string{}

// repoRoot is the repository's root, from this package's directory.
const repoRoot = "../.."

// TestFileAndFunctionSizes fails when a hand-written non-test Go file of
// the repository is over MaxFileLines lines or holds a function (or
// method, or function literal at top level of a declaration) over
// MaxFuncLines lines, unless the file is a known exception. Test files,
// testdata/, *.pb.go and files marked "Code generated" are not looked at.
func TestFileAndFunctionSizes(t *testing.T) {
	files := goSources(t)
	for _, file := range files {
		problems := sizeProblems(t, file)
		_, known := knownOversized[file]
		switch {
		case len(problems) > 0 && !known:
			for _, p := range problems {
				t.Errorf("%s: %s: split it by concern", file, p)
			}
		case len(problems) == 0 && known:
			t.Errorf("%s is within the limits now: remove it from knownOversized", file)
		}
	}
	for file := range knownOversized {
		if _, err := fs.Stat(osDir, file); err != nil {
			t.Errorf("known exception %s: %v: remove it from knownOversized", file, err)
		}
	}
}

// sizeProblems lists how the file is over the limits.
func sizeProblems(t *testing.T, file string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join(repoRoot, file), nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	if n := fset.File(f.Pos()).LineCount(); n > MaxFileLines {
		out = append(out, fmt.Sprintf("%d lines (limit %d)", n, MaxFileLines))
	}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		start, end := fset.Position(fd.Pos()).Line, fset.Position(fd.End()).Line
		if n := end - start + 1; n > MaxFuncLines {
			out = append(out, fmt.Sprintf("func %s at line %d: %d lines (limit %d)", funcName(fd), start, n, MaxFuncLines))
		}
	}
	return out
}

func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	recv := fd.Recv.List[0].Type
	if s, ok := recv.(*ast.StarExpr); ok {
		recv = s.X
	}
	if ix, ok := recv.(*ast.IndexExpr); ok {
		recv = ix.X
	}
	if ix, ok := recv.(*ast.IndexListExpr); ok {
		recv = ix.X
	}
	if id, ok := recv.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// goSources lists the repository's hand-written non-test Go files (paths
// from its root, with forward slashes): not under testdata/, not *_test.go,
// not *.pb.go, not marked "Code generated".
func goSources(t *testing.T) []string {
	t.Helper()
	var out []string
	err := fs.WalkDir(osDir, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != "." && (name == "testdata" || name == "node_modules" || name == "vendor" || strings.HasPrefix(name, ".")) {
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") || strings.HasSuffix(name, ".pb.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(repoRoot, path), nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		if !ast.IsGenerated(f) {
			out = append(out, path)
		}
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

// osDir is the repository's tree.
var osDir = os.DirFS(repoRoot)
