package drainer

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestReferenceMetricsExist: every metric docs/reference.md §7 names is
// registered by NewMetrics and exposed once the engine has started (its
// label values pre-initialised), so the reference never promises a series
// that does not exist.
func TestReferenceMetricsExist(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../docs/reference.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start, end := strings.Index(doc, "\n## 7. "), strings.Index(doc, "\n## 8. ")
	if start < 0 || end < start {
		t.Fatal("docs/reference.md has no §7")
	}
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(drainer_[a-z_]+)`").FindAllStringSubmatch(doc[start:end], -1) {
		named[m[1]] = true
	}
	if len(named) < 12 {
		t.Fatalf("docs/reference.md §7 names %d metrics, want the 12 of its table", len(named))
	}
	reg := prometheus.NewRegistry()
	NewMetrics(reg, "test").InitAdapters([]string{"payments"}) // as the engine does at start
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		delete(named, f.GetName())
	}
	for name := range named {
		t.Errorf("docs/reference.md §7 names %s, which is not exposed at startup", name)
	}
}
