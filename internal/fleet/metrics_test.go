package fleet

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/drainer"
	"github.com/prometheus/client_golang/prometheus"
)

// TestReferenceFleetMetrics: docs/reference.md §7 names exactly the
// drainer_fleet_* series a replica exposes from startup.
func TestReferenceFleetMetrics(t *testing.T) {
	t.Parallel()
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

// TestFleetMetricsFromStartup: every drainer_fleet_* family is exposed as
// soon as the fleet exists, its labelled series at 0: each state, each
// hand-over direction, and each reason for each database the config
// names. A database the list adds gets its series at 0, one it drops loses
// them.
func TestFleetMetricsFromStartup(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	listed := []Database{{Name: "tenant-a"}, {Name: "tenant-b"}}
	f, err := New(Config{Source: func(context.Context) ([]Database, error) { return listed, nil },
		Routing: func() *drainer.Routing { return nil }, CoordinationURL: "postgres://127.0.0.1:1/x",
		Engine: drainer.Config{Workers: 1}, Registerer: reg, Known: []string{"tenant-a", "tenant-b"}})
	if err != nil {
		t.Fatal(err)
	}
	series := func(atStartup bool) map[string][]string {
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]string{}
		for _, mf := range families {
			if !strings.HasPrefix(mf.GetName(), "drainer_fleet_") {
				continue
			}
			for _, m := range mf.GetMetric() {
				var labels []string
				for _, l := range m.GetLabel() {
					labels = append(labels, l.GetName()+"="+l.GetValue())
				}
				v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
				if atStartup && v != 0 {
					t.Errorf("%s%v = %v at startup, want 0", mf.GetName(), labels, v)
				}
				out[mf.GetName()] = append(out[mf.GetName()], strings.Join(labels, ","))
			}
		}
		return out
	}
	got := series(true)
	for _, name := range []string{"drainer_fleet_members", "drainer_fleet_member_expiries_total", "drainer_fleet_databases",
		"drainer_fleet_database_errors_total", "drainer_fleet_catalog_errors_total", "drainer_fleet_heartbeat_errors_total",
		"drainer_fleet_handovers_total"} {
		if len(got[name]) == 0 {
			t.Errorf("%s not exposed at startup", name)
		}
	}
	var want []string
	for _, db := range []string{"tenant-a", "tenant-b"} {
		for _, r := range reasons {
			want = append(want, "database="+db+",reason="+r)
		}
	}
	slices.Sort(want)
	if e := slices.Sorted(slices.Values(got["drainer_fleet_database_errors_total"])); !slices.Equal(e, want) {
		t.Errorf("drainer_fleet_database_errors_total series %v, want %v", e, want)
	}

	// The list changes: tenant-c is added, tenant-a dropped.
	listed = []Database{{Name: "tenant-b"}, {Name: "tenant-c"}}
	f.list(t.Context())
	want = want[:0]
	for _, db := range []string{"tenant-b", "tenant-c"} {
		for _, r := range reasons {
			want = append(want, "database="+db+",reason="+r)
		}
	}
	slices.Sort(want)
	if e := slices.Sorted(slices.Values(series(false)["drainer_fleet_database_errors_total"])); !slices.Equal(e, want) {
		t.Errorf("after the list changed: drainer_fleet_database_errors_total series %v, want %v", e, want)
	}
}
