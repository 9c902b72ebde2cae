package config

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// readmeMaxLines bounds the README: it says what drainer is, the model, the
// quick start and where to look; everything else lives under docs/.
const readmeMaxLines = 350

// TestReadmeIsShort keeps README.md a page a newcomer reads in one sitting.
func TestReadmeIsShort(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, at most %d: move the detail to a page under docs/ and link it", n, readmeMaxLines)
	}
}

// TestDocsLinksResolve: every relative link of README.md and docs/**/*.md
// points to a file or directory that exists, and a #fragment pointing into
// a Markdown file names one of its headings.
func TestDocsLinksResolve(t *testing.T) {
	root := ".."
	files := docFiles(t, root)
	if len(files) < 2 {
		t.Fatalf("found %v, want README.md and the pages under docs/", files)
	}
	for _, problem := range brokenLinks(root, files) {
		t.Error(problem)
	}
}

// TestDocsIndexListsEveryPage: docs/README.md links every Markdown page
// under docs/.
func TestDocsIndexListsEveryPage(t *testing.T) {
	root := ".."
	index := filepath.Join(root, "docs", "README.md")
	b, err := os.ReadFile(index)
	if err != nil {
		t.Fatal(err)
	}
	linked := map[string]bool{}
	for _, l := range markdownLinks(string(b)) {
		target, _, _ := strings.Cut(l.target, "#")
		if target != "" && !isExternal(target) {
			linked[filepath.Clean(filepath.Join(filepath.Dir(index), filepath.FromSlash(target)))] = true
		}
	}
	for _, f := range docFiles(t, root) {
		if f == index || filepath.Dir(f) == filepath.Clean(root) {
			continue
		}
		if !linked[filepath.Clean(f)] {
			rel, _ := filepath.Rel(root, f)
			t.Errorf("docs/README.md does not link %s", filepath.ToSlash(rel))
		}
	}
}

// TestBrokenLinksAreFound checks the checker: a missing file, a missing
// heading and a link out of a code span are each told apart.
func TestBrokenLinksAreFound(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "docs"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) string {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	page := write("docs/page.md", "# A page\n\n## The `/api/v1/` API\n\n## Twice\n\n## Twice\n")
	readme := write("README.md", strings.Join([]string{
		"# x",
		"[ok](docs/page.md) [ok](docs/page.md#the-apiv1-api) [ok](docs/page.md#twice-1) [ok](#x)",
		"[ok](https://example.com/nowhere.md) ![ok](docs/page.md \"title\") [ok](<docs/page.md>)",
		"`[not a link](missing.md)`",
		"```",
		"[not a link](missing.md)",
		"```",
		"[bad](docs/missing.md) [bad](docs/page.md#nowhere) [bad](#nowhere)",
		"[ref]: docs/gone.md",
	}, "\n"))
	got := brokenLinks(dir, []string{readme, page})
	want := []string{"docs/missing.md", "docs/page.md#nowhere", "#nowhere", "docs/gone.md"}
	if len(got) != len(want) {
		t.Fatalf("problems %q, want one for each of %q", got, want)
	}
	for i, w := range want {
		if !strings.Contains(got[i], "("+w+")") {
			t.Errorf("problem %d is %q, want one about %s", i, got[i], w)
		}
	}
}

// docFiles lists README.md and every Markdown file under docs/.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	files := []string{filepath.Join(root, "README.md")}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

type mdLink struct {
	line   int
	target string
}

var (
	// [text](target) and ![alt](target), target optionally in <>, then an
	// optional "title".
	inlineLink = regexp.MustCompile(`\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+"[^"]*")?\s*\)`)
	// [id]: target
	refLink    = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s+(<[^>]*>|\S+)`)
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
	fenceStart = regexp.MustCompile("^\\s{0,3}(```|~~~)")
)

// markdownLinks returns the link targets of a Markdown text outside code
// blocks and code spans.
func markdownLinks(text string) []mdLink {
	var links []mdLink
	fence := ""
	for i, line := range strings.Split(text, "\n") {
		if m := fenceStart.FindStringSubmatch(line); m != nil {
			switch {
			case fence == "":
				fence = m[1]
				continue
			case m[1] == fence:
				fence = ""
				continue
			}
		}
		if fence != "" {
			continue
		}
		if m := refLink.FindStringSubmatch(line); m != nil {
			links = append(links, mdLink{i + 1, strings.Trim(m[1], "<>")})
			continue
		}
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			links = append(links, mdLink{i + 1, strings.Trim(m[1], "<>")})
		}
	}
	return links
}

func isExternal(target string) bool {
	return regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`).MatchString(target) || strings.HasPrefix(target, "//")
}

// brokenLinks checks the relative links of files (paths under root) and
// returns one problem per broken link, in order.
func brokenLinks(root string, files []string) []string {
	var problems []string
	anchors := map[string][]string{}
	anchorsOf := func(p string) ([]string, error) {
		if a, ok := anchors[p]; ok {
			return a, nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		anchors[p] = headingAnchors(string(b))
		return anchors[p], nil
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		rel, _ := filepath.Rel(root, f)
		for _, l := range markdownLinks(string(b)) {
			if isExternal(l.target) {
				continue
			}
			where := fmt.Sprintf("%s:%d: link (%s)", filepath.ToSlash(rel), l.line, l.target)
			path, fragment, _ := strings.Cut(l.target, "#")
			dest := f
			if path != "" {
				dest = filepath.Join(filepath.Dir(f), filepath.FromSlash(path))
				if _, err := os.Stat(dest); err != nil {
					problems = append(problems, where+": no such file")
					continue
				}
			}
			if fragment == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			a, err := anchorsOf(dest)
			if err != nil {
				problems = append(problems, where+": "+err.Error())
				continue
			}
			if !slices.Contains(a, fragment) {
				problems = append(problems, where+": no heading with that anchor")
			}
		}
	}
	return problems
}

var atxHeading = regexp.MustCompile(`^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$`)

// headingAnchors returns the anchors GitHub gives a Markdown text's
// headings: lower case, punctuation dropped but for - and _, spaces made
// hyphens, a repeated anchor numbered -1, -2, ….
func headingAnchors(text string) []string {
	var anchors []string
	seen := map[string]int{}
	fence := ""
	for _, line := range strings.Split(text, "\n") {
		if m := fenceStart.FindStringSubmatch(line); m != nil {
			switch {
			case fence == "":
				fence = m[1]
				continue
			case m[1] == fence:
				fence = ""
				continue
			}
		}
		if fence != "" {
			continue
		}
		m := atxHeading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		// [text](url) counts as its text.
		title := regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(m[1], "$1")
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			seen[a] = n + 1
			a = fmt.Sprintf("%s-%d", a, n)
		} else {
			seen[a] = 1
		}
		anchors = append(anchors, a)
	}
	return anchors
}

// TestReadmeStartsTheMCPReferenceServer: the README gives the one command
// that installs and starts the MCP reference server the tests pin (the
// Makefile's mcp-everything target, the package's entry point).
func TestReadmeStartsTheMCPReferenceServer(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("..", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	const dir = "integration/testdata/mcp-everything"
	entry := dir + "/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
	if cmd := "make mcp-everything && PORT=3001 node " + entry + " streamableHttp"; !strings.Contains(read("README.md"), cmd) {
		t.Errorf("README.md does not say how to start the MCP reference server: %s", cmd)
	}
	if !strings.Contains(read("Makefile"), "\nmcp-everything:\n\tcd "+dir+" && npm ci") {
		t.Errorf("the Makefile's mcp-everything target no longer installs %s", dir)
	}
	if !strings.Contains(read(dir+"/package.json"), `"@modelcontextprotocol/server-everything"`) {
		t.Errorf("%s/package.json does not pin @modelcontextprotocol/server-everything", dir)
	}
}
