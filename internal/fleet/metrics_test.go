package fleet

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestReferenceFleetMetrics: docs/reference.md §7 names exactly the
// drainer_fleet_* series a replica exposes from startup.
func TestReferenceFleetMetrics(t *testing.T) {
	b, err := os.ReadFile("../../docs/reference.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start, end := strings.Index(doc, "\n## 7. "), strings.Index(doc, "\n## 8. ")
	if start < 0 || end < start {
		t.Fatal("docs/reference.md has no §7")
	}
	var named []string
	for _, m := range regexp.MustCompile("(?m)^- `(drainer_fleet_[a-z_]+)`").FindAllStringSubmatch(doc[start:end], -1) {
		named = append(named, m[1])
	}
	reg := prometheus.NewRegistry()
	newMetrics(reg).dbErrors.WithLabelValues("x", reasonUnreachable)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var exposed []string
	for _, f := range families {
		exposed = append(exposed, f.GetName())
	}
	slices.Sort(named)
	slices.Sort(exposed)
	if !slices.Equal(named, exposed) {
		t.Errorf("docs/reference.md §7 names %v; a replica exposes %v", named, exposed)
	}
}
