package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// kedaScenario is a backlog as the replicas export it, and the number of
// rows the KEDA query must scale on.
type kedaScenario struct {
	name   string
	series []string // `name{labels} value`, without namespace and job
	want   float64
}

// invented returns the drainer_unrouted_rows series of a producer that
// invents a tool name per row: the snapshot names the 20 largest tools only
// (store.maxUnroutedTools), one row each, whatever their number.
func invented(pod, database string) []string {
	var out []string
	for i := range 20 {
		out = append(out, fmt.Sprintf(`drainer_unrouted_rows{pod=%q,database=%q,tool="invented_%d"} 1`, pod, database, i))
	}
	return out
}

var kedaScenarios = []kedaScenario{
	{
		// 5,000 rows of 5,000 invented tools (no replica can send them) and
		// 100 routed rows drained on time: nothing to scale on (the
		// subtraction alone would leave 4,980 + 100 rows).
		name: "5,000 invented tools, routed rows on time",
		series: append(invented("a", ""),
			`drainer_outbox_rows{pod="a",database="",status="pending"} 5100`,
			`drainer_outbox_rows{pod="b",database="",status="pending"} 5100`,
			`drainer_outbox_oldest_pending_age_seconds{pod="a",database=""} 2`,
			`drainer_outbox_oldest_pending_age_seconds{pod="b",database=""} 2`),
		want: 0,
	},
	{
		// Rows held back by an open breaker are pending and not due.
		name: "rows held by an open breaker",
		series: []string{
			`drainer_outbox_rows{pod="a",database="",status="pending"} 8000`,
			`drainer_outbox_oldest_pending_age_seconds{pod="a",database=""} 0`,
		},
		want: 0,
	},
	{
		// A late backlog scales: its pending rows minus the unrouted ones.
		name: "late backlog",
		series: []string{
			`drainer_outbox_rows{pod="a",database="",status="pending"} 3000`,
			`drainer_outbox_rows{pod="b",database="",status="pending"} 3000`,
			`drainer_unrouted_rows{pod="a",database="",tool="typo"} 20`,
			`drainer_unrouted_rows{pod="b",database="",tool="typo"} 20`,
			`drainer_outbox_oldest_pending_age_seconds{pod="a",database=""} 400`,
			`drainer_outbox_oldest_pending_age_seconds{pod="b",database=""} 400`,
		},
		want: 2980,
	},
	{
		// A fleet: tenant-a is late (exported by two replicas during a
		// hand-over), tenant-b holds 5,000 rows of invented tools and
		// drains its routed rows on time: only tenant-a's rows count.
		name: "fleet: one late database, one with invented tools",
		series: append(invented("b", "tenant-b"),
			`drainer_outbox_rows{pod="a",database="tenant-a",status="pending"} 1000`,
			`drainer_outbox_rows{pod="b",database="tenant-a",status="pending"} 990`,
			`drainer_outbox_oldest_pending_age_seconds{pod="a",database="tenant-a"} 400`,
			`drainer_outbox_oldest_pending_age_seconds{pod="b",database="tenant-a"} 380`,
			`drainer_unrouted_rows{pod="a",database="tenant-a",tool="send_email"} 0`,
			`drainer_outbox_rows{pod="b",database="tenant-b",status="pending"} 5000`,
			`drainer_outbox_oldest_pending_age_seconds{pod="b",database="tenant-b"} 1`),
		want: 1000,
	},
	{
		name:   "no replica exports yet",
		series: []string{`up{pod="a"} 1`},
		want:   0,
	},
}

// checkKEDAQuery evaluates query, a KEDA trigger selecting namespace and
// job, on every scenario with promtool (`make test` installs it; the
// Prometheus engine is not among the module's dependencies).
func checkKEDAQuery(t *testing.T, query, namespace, job string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found: %v (make promtool installs it; make test does first)", err)
	}
	type sample struct {
		Labels string  `json:"labels"`
		Value  float64 `json:"value"`
	}
	type exprTest struct {
		Expr       string   `json:"expr"`
		EvalTime   string   `json:"eval_time"`
		ExpSamples []sample `json:"exp_samples"`
	}
	type series struct {
		Series string `json:"series"`
		Values string `json:"values"`
	}
	type group struct {
		Name      string     `json:"name"`
		Interval  string     `json:"interval"`
		Input     []series   `json:"input_series"`
		ExprTests []exprTest `json:"promql_expr_test"`
	}
	var groups []group
	for _, sc := range kedaScenarios {
		g := group{Name: sc.name, Interval: "1m",
			ExprTests: []exprTest{{Expr: query, EvalTime: "10m", ExpSamples: []sample{{Labels: "{}", Value: sc.want}}}}}
		for _, s := range sc.series {
			name, rest, _ := strings.Cut(s, "{")
			labels, value, _ := strings.Cut(rest, "} ")
			labels = strings.ReplaceAll(labels, `,database=""`, "")
			labels = strings.ReplaceAll(labels, `database="",`, "")
			g.Input = append(g.Input, series{fmt.Sprintf("%s{namespace=%q,job=%q,%s}", name, namespace, job, labels), value + "x10"})
		}
		groups = append(groups, g)
	}
	data, err := yaml.Marshal(map[string]any{"rule_files": []string{}, "evaluation_interval": "1m", "tests": groups})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "keda_test.yaml")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "test", "rules", file).CombinedOutput()
	if err != nil {
		t.Errorf("the KEDA query for namespace %s, job %s does not scale on the rows it should:\n%s\nquery: %s", namespace, job, out, query)
	}
}

// TestScaledObjectQueryCountsDrainableRows: the KEDA trigger (kustomize
// and chart) scales on rows the replicas can drain and are late with, not
// on rows no replica can send (invented tool names past the 20 that
// drainer_unrouted_rows names, rows behind an open breaker).
func TestScaledObjectQueryCountsDrainableRows(t *testing.T) {
	m := load(t)
	checkKEDAQuery(t, m.scaledObject.Spec.Triggers[0].Metadata["query"], m.kustomization.Namespace, m.service.Name)
	for _, rel := range []release{defaultRelease, {"payments", "billing"}} {
		c := chartManifests(t, rel, allOptional)
		checkKEDAQuery(t, c.scaledObject.Spec.Triggers[0].Metadata["query"], rel.namespace, c.service.Name)
	}
}
