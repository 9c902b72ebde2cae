package dashboards

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"github.com/drainer-io/drainer/drainer"
	"github.com/drainer-io/drainer/gateway"
	"github.com/drainer-io/drainer/internal/fleet"
	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	dashboardFile = "drainer.json"
	rulesFile     = "alerts.rules.yaml"
	rulesTestFile = "alerts_test.yaml"
	// datasourceVar is the dashboard's datasource template variable.
	datasourceVar = "datasource"
)

// exported returns the metric families the daemon exports, built exactly as
// the daemon builds its registry (the MCP gateway's too, as a gateway with
// one tool registers them, and a fleet's drainer_fleet_*, as a fleet
// registers them before it runs), with their types (histograms under their base
// name). Gather omits a vector that has no series yet (such as
// drainer_unrouted_rows while every tool is routed), so the registry's
// descriptors are read too; those names get a nil type.
func exported(t *testing.T) map[string]*dto.MetricType {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := drainer.NewMetrics(reg, "test")
	m.InitAdapters([]string{"a"})
	registerGateway(t, reg)
	registerFleet(t, reg)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	names := map[string]*dto.MetricType{}
	for _, mf := range mfs {
		names[mf.GetName()] = mf.Type
	}
	ch := make(chan *prometheus.Desc)
	go func() { reg.Describe(ch); close(ch) }()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range ch {
		sm := fqName.FindStringSubmatch(d.String())
		if sm == nil {
			t.Fatalf("cannot read the name of descriptor %s", d)
		}
		if _, ok := names[sm[1]]; !ok {
			names[sm[1]] = nil
		}
	}
	return names
}

// registerGateway builds a gateway (never served: its database is not
// connected to) with one tool, which registers its metrics with reg as the
// daemon's gateway does.
func registerGateway(t *testing.T, reg prometheus.Registerer) {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), "postgres://127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	_, err = gateway.New(gateway.Config{Listener: ln, DB: pool, Store: store.MustNew("drainer"), Registerer: reg,
		Tools: []gateway.Tool{{Name: "t", Adapter: "a", Definition: json.RawMessage(`{"name":"t","inputSchema":{"type":"object"}}`)}}})
	if err != nil {
		t.Fatalf("gateway: %v", err)
	}
}

// registerFleet builds a fleet (never run: nothing is connected to) with
// one known database, which registers the fleet's own collectors with reg
// as the daemon's fleet does (the build info, already registered, is
// shared).
func registerFleet(t *testing.T, reg prometheus.Registerer) {
	t.Helper()
	_, err := fleet.New(fleet.Config{
		Source:          func(context.Context) ([]fleet.Database, error) { return nil, nil },
		Routing:         func() *drainer.Routing { return nil },
		CoordinationURL: "postgres://127.0.0.1:1/none",
		Engine:          drainer.Config{Workers: 1},
		Registerer:      reg,
		Version:         "test",
		Known:           []string{"d"},
	})
	if err != nil {
		t.Fatalf("fleet: %v", err)
	}
}

// resolve maps a series name used in a query to the exported family it
// belongs to ("" if none): histogram and summary series carry a suffix.
func resolve(name string, exp map[string]*dto.MetricType) string {
	if _, ok := exp[name]; ok {
		return name
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		typ, found := exp[base]
		if !found || typ == nil {
			continue
		}
		switch *typ {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			return base
		case dto.MetricType_SUMMARY:
			if suffix != "_bucket" {
				return base
			}
		}
	}
	return ""
}

// grafanaVars are Grafana's built-in interval variables, which PromQL cannot
// parse; any duration stands in for them.
var grafanaVars = regexp.MustCompile(`\$\{?__(rate_interval|interval|range)(_ms|_s)?\}?`)

var promql = parser.NewParser(parser.Options{})

// metricNames parses expr (after replacing Grafana's interval variables) and
// returns the metric names of its vector selectors.
func metricNames(expr string) ([]string, error) {
	e, err := promql.ParseExpr(grafanaVars.ReplaceAllString(expr, "5m"))
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		if name == "" {
			for _, m := range vs.LabelMatchers {
				if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
					name = m.Value
				}
			}
		}
		names = append(names, name)
		return nil
	})
	return names, nil
}

// query is one PromQL expression and where it comes from.
type query struct {
	where string
	expr  string
}

// checkQueries parses every query and checks each drainer_* metric it uses
// is exported; it returns the exported families used.
func checkQueries(t *testing.T, qs []query) map[string]bool {
	t.Helper()
	exp := exported(t)
	used := map[string]bool{}
	for _, q := range qs {
		names, err := metricNames(q.expr)
		if err != nil {
			t.Errorf("%s: PromQL does not parse: %v\n  %s", q.where, err, q.expr)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s: no metric in %q", q.where, q.expr)
		}
		for _, n := range names {
			if n == "" {
				t.Errorf("%s: selector without a metric name in %q", q.where, q.expr)
				continue
			}
			if !strings.HasPrefix(n, "drainer_") {
				continue // up, process_*, go_*: not the daemon's own names
			}
			if base := resolve(n, exp); base != "" {
				used[base] = true
			} else {
				t.Errorf("%s: metric %s is not exported by the daemon (drainer.NewMetrics)", q.where, n)
			}
		}
	}
	return used
}

// --- dashboard ---

func loadDashboard(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// panels returns every panel of the dashboard, rows and the panels nested in
// collapsed rows included (and the legacy rows[].panels layout).
func panels(d map[string]any) []map[string]any {
	var out []map[string]any
	var walk func(list any)
	walk = func(list any) {
		arr, _ := list.([]any)
		for _, p := range arr {
			pm, ok := p.(map[string]any)
			if !ok {
				continue
			}
			out = append(out, pm)
			walk(pm["panels"])
		}
	}
	walk(d["panels"])
	walk(d["rows"])
	return out
}

func title(p map[string]any) string {
	s, _ := p["title"].(string)
	return fmt.Sprintf("panel %q (id %v)", s, p["id"])
}

// refersToVar reports whether a datasource value is the ${datasource} variable.
func refersToVar(ds any) bool {
	isVar := func(s string) bool { return s == "$"+datasourceVar || s == "${"+datasourceVar+"}" }
	switch v := ds.(type) {
	case string:
		return isVar(v)
	case map[string]any:
		uid, _ := v["uid"].(string)
		typ, _ := v["type"].(string)
		return isVar(uid) && (typ == "" || typ == "prometheus")
	}
	return false
}

func templateVars(d map[string]any) []map[string]any {
	tm, _ := d["templating"].(map[string]any)
	list, _ := tm["list"].([]any)
	var out []map[string]any
	for _, v := range list {
		if vm, ok := v.(map[string]any); ok {
			out = append(out, vm)
		}
	}
	return out
}

// dashboardQueries returns every PromQL expression of the dashboard: panel
// targets and the template variables' label_values/query_result queries.
func dashboardQueries(t *testing.T, d map[string]any) []query {
	var qs []query
	for _, p := range panels(d) {
		targets, _ := p["targets"].([]any)
		for _, tg := range targets {
			tm, _ := tg.(map[string]any)
			if expr, _ := tm["expr"].(string); expr != "" {
				qs = append(qs, query{fmt.Sprintf("%s target %v", title(p), tm["refId"]), expr})
			}
		}
	}
	labelValues := regexp.MustCompile(`^\s*label_values\((.+),\s*\w+\s*\)\s*$`)
	queryResult := regexp.MustCompile(`^\s*query_result\((.+)\)\s*$`)
	for _, v := range templateVars(d) {
		if v["type"] != "query" {
			continue
		}
		q, _ := v["query"].(string)
		if qm, ok := v["query"].(map[string]any); ok {
			q, _ = qm["query"].(string)
		}
		where := fmt.Sprintf("variable %v", v["name"])
		if m := labelValues.FindStringSubmatch(q); m != nil {
			qs = append(qs, query{where, m[1]})
		} else if m := queryResult.FindStringSubmatch(q); m != nil {
			qs = append(qs, query{where, m[1]})
		} else {
			t.Errorf("%s: query %q is neither label_values(selector, label) nor query_result(expr)", where, q)
		}
	}
	return qs
}

func TestDashboardQueriesUseExportedMetrics(t *testing.T) {
	d := loadDashboard(t)
	qs := dashboardQueries(t, d)
	if len(qs) < 20 {
		t.Fatalf("only %d queries found in %s: is the panel walk broken?", len(qs), dashboardFile)
	}
	used := checkQueries(t, qs)

	// The other way round: every drainer_* family has a panel, so a metric
	// added to the daemon is either shown or deliberately left out here.
	var missing []string
	for name := range exported(t) {
		if strings.HasPrefix(name, "drainer_") && !used[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("metrics exported by the daemon but on no panel of %s: %s", dashboardFile, strings.Join(missing, ", "))
	}
}

func TestDashboardDatasourceVariable(t *testing.T) {
	d := loadDashboard(t)
	found := false
	for _, v := range templateVars(d) {
		switch v["type"] {
		case "datasource":
			if v["name"] == datasourceVar && v["query"] == "prometheus" {
				found = true
			}
		case "query":
			if !refersToVar(v["datasource"]) {
				t.Errorf("variable %v: datasource %v is not ${%s}", v["name"], v["datasource"], datasourceVar)
			}
		}
	}
	if !found {
		t.Fatalf("no template variable %q of type datasource with query prometheus", datasourceVar)
	}

	ids := map[float64]string{}
	for _, p := range panels(d) {
		if !refersToVar(p["datasource"]) {
			t.Errorf("%s: datasource %v is not ${%s}", title(p), p["datasource"], datasourceVar)
		}
		if id, ok := p["id"].(float64); !ok {
			t.Errorf("%s: no numeric id", title(p))
		} else if prev, dup := ids[id]; dup {
			t.Errorf("%s: id also used by %s", title(p), prev)
		} else {
			ids[id] = title(p)
		}
		if _, ok := p["gridPos"].(map[string]any); !ok {
			t.Errorf("%s: no gridPos", title(p))
		}
		if p["type"] == "row" {
			continue
		}
		targets, _ := p["targets"].([]any)
		if len(targets) == 0 {
			t.Errorf("%s: no targets", title(p))
		}
		for _, tg := range targets {
			tm, _ := tg.(map[string]any)
			if ds, ok := tm["datasource"]; ok && !refersToVar(ds) {
				t.Errorf("%s target %v: datasource %v is not ${%s}", title(p), tm["refId"], ds, datasourceVar)
			}
		}
	}
	if d["uid"] == nil || d["uid"] == "" || d["title"] == nil {
		t.Errorf("dashboard needs a uid and a title")
	}
	if id, ok := d["id"]; ok && id != nil {
		t.Errorf("dashboard id must be null so it imports as-is, got %v", id)
	}
}

// --- alert rules ---

type ruleFile struct {
	Groups []struct {
		Name     string `json:"name"`
		Interval string `json:"interval,omitempty"`
		Rules    []struct {
			Alert       string            `json:"alert,omitempty"`
			Record      string            `json:"record,omitempty"`
			Expr        string            `json:"expr"`
			For         string            `json:"for,omitempty"`
			Labels      map[string]string `json:"labels,omitempty"`
			Annotations map[string]string `json:"annotations,omitempty"`
		} `json:"rules"`
	} `json:"groups"`
}

func loadRules(t *testing.T) ruleFile {
	t.Helper()
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.UnmarshalStrict(data, &rf); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	return rf
}

func TestAlertRules(t *testing.T) {
	rf := loadRules(t)
	var qs []query
	seen := map[string]bool{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			name := r.Alert + r.Record
			where := fmt.Sprintf("%s: rule %s", rulesFile, name)
			qs = append(qs, query{where, r.Expr})
			if r.Alert == "" {
				continue
			}
			if seen[r.Alert] {
				t.Errorf("%s: alert name used twice", where)
			}
			seen[r.Alert] = true
			if s := r.Labels["severity"]; s != "page" && s != "ticket" {
				t.Errorf("%s: severity %q, want page or ticket", where, s)
			}
			if r.Annotations["summary"] == "" {
				t.Errorf("%s: no summary annotation", where)
			}
			// The description says what to do: a command to run.
			if d := r.Annotations["description"]; !strings.Contains(d, "`drainer ") && !strings.Contains(d, "`kubectl ") && !strings.Contains(d, "`SELECT ") {
				t.Errorf("%s: the description names no command to run (`drainer …`, `kubectl …`)", where)
			}
		}
	}
	if len(seen) == 0 {
		t.Fatalf("%s: no alert", rulesFile)
	}
	checkQueries(t, qs)

	// docs/reference.md §7: the page for rows a human must settle is on the gauge.
	var paged []string
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Labels["severity"] == "page" && strings.Contains(r.Expr, "drainer_outbox_rows") {
				for _, st := range []string{"compensation_failed", "outcome_unknown"} {
					if strings.Contains(r.Expr, st) {
						paged = append(paged, st)
					}
				}
			}
		}
	}
	for _, st := range []string{"compensation_failed", "outcome_unknown"} {
		if !slices.Contains(paged, st) {
			t.Errorf("no page on drainer_outbox_rows{status=%q}", st)
		}
	}
}

// TestAlertUnitTestsCoverEveryAlert checks alerts_test.yaml has, for every
// alert, an evaluation where it fires and one where it stays quiet (promtool
// runs them; this only checks none is forgotten).
func TestAlertUnitTestsCoverEveryAlert(t *testing.T) {
	rf := loadRules(t)
	data, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		RuleFiles []string `json:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				AlertName string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(data, &tf); err != nil {
		t.Fatalf("%s: %v", rulesTestFile, err)
	}
	if !slices.Contains(tf.RuleFiles, rulesFile) {
		t.Errorf("%s: rule_files %v does not load %s", rulesTestFile, tf.RuleFiles, rulesFile)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tf.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.AlertName] = true
			} else {
				quiet[a.AlertName] = true
			}
		}
	}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if !fires[r.Alert] {
				t.Errorf("%s: no test case where %s fires", rulesTestFile, r.Alert)
			}
			if !quiet[r.Alert] {
				t.Errorf("%s: no test case where %s stays quiet", rulesTestFile, r.Alert)
			}
		}
	}
}

// TestYAMLFilesMatchMakefileGlobs: `make test` runs promtool check rules on
// dashboards/*rules*.yaml and promtool test rules on dashboards/*_test.yaml;
// any other YAML here would be silently skipped (or, matching both, fail).
func TestYAMLFilesMatchMakefileGlobs(t *testing.T) {
	files, err := filepath.Glob("*.y*ml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		rules, _ := filepath.Match("*rules*.yaml", f)
		tests, _ := filepath.Match("*_test.yaml", f)
		if rules == tests {
			t.Errorf("%s must match exactly one of *rules*.yaml (promtool check rules) and *_test.yaml (promtool test rules)", f)
		}
	}
}

// databaseVar is the dashboard's database template variable.
const databaseVar = "database"

// databaseMetrics returns the families whose series depend on a database:
// with databases: in the config they carry a database label (absent with a
// single database). They are every family of one database's engine
// (drainer.NewDatabaseMetrics, which a fleet registers once per database
// under the database label: backlog, dispatch, breakers, holds, workers,
// table health alike), plus drainer_fleet_database_errors_total, labelled
// by database itself. The other families describe a process (build, MCP
// gateway, fleet membership) and never carry it.
func databaseMetrics(t *testing.T) []string {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := drainer.NewDatabaseMetrics(reg)
	m.InitAdapters([]string{"a"})
	names := []string{"drainer_fleet_database_errors_total"}
	ch := make(chan *prometheus.Desc)
	go func() { reg.Describe(ch); close(ch) }()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range ch {
		sm := fqName.FindStringSubmatch(d.String())
		if sm == nil {
			t.Fatalf("cannot read the name of descriptor %s", d)
		}
		if !slices.Contains(names, sm[1]) {
			names = append(names, sm[1])
		}
	}
	if len(names) < 20 {
		t.Fatalf("only %d database families: %v", len(names), names)
	}
	return names
}

// TestDashboardDatabaseVariable: the dashboard has a multi-value database
// variable whose All is ".*", and every selector of a database's series
// filters on it while process series do not (choosing a database must not
// blank the workers or build panels). ".*" also matches a series without
// the label, so a single-database deployment shows everything under All.
func TestDashboardDatabaseVariable(t *testing.T) {
	d := loadDashboard(t)
	var v map[string]any
	for _, tv := range templateVars(d) {
		if tv["name"] == databaseVar {
			v = tv
		}
	}
	if v == nil {
		t.Fatalf("no template variable %q", databaseVar)
	}
	q, _ := v["definition"].(string)
	if v["type"] != "query" || v["includeAll"] != true || v["multi"] != true || v["allValue"] != ".*" ||
		!regexp.MustCompile(`^label_values\(drainer_\w+\{.*\}, database\)$`).MatchString(q) {
		t.Errorf("variable %s = %v", databaseVar, v)
	}
	m, err := labels.NewMatcher(labels.MatchRegexp, databaseVar, ".*")
	if err != nil || !m.Matches("") {
		t.Fatalf(`database=~".*" must match a series without the label`)
	}

	exp := exported(t)
	dbMetrics := databaseMetrics(t)
	filtered := 0
	for _, q := range dashboardQueries(t, d) {
		if strings.HasPrefix(q.where, "variable ") {
			continue
		}
		e, err := promql.ParseExpr(grafanaVars.ReplaceAllString(q.expr, "5m"))
		if err != nil {
			continue // reported by TestDashboardQueriesUseExportedMetrics
		}
		parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
			vs, ok := n.(*parser.VectorSelector)
			if !ok {
				return nil
			}
			want := slices.Contains(dbMetrics, resolve(vs.Name, exp))
			has := false
			for _, lm := range vs.LabelMatchers {
				if lm.Name == databaseVar {
					has = lm.Type == labels.MatchRegexp && lm.Value == "$"+databaseVar
				}
			}
			switch {
			case want && !has:
				t.Errorf("%s: %s lacks database=~\"$%s\"", q.where, vs.Name, databaseVar)
			case !want && has:
				t.Errorf("%s: %s is not a database's series but filters on $%s", q.where, vs.Name, databaseVar)
			case has:
				filtered++
			}
			return nil
		})
	}
	if filtered < 10 {
		t.Errorf("only %d selectors filter on $%s", filtered, databaseVar)
	}
	for _, name := range dbMetrics {
		if _, ok := exp[name]; !ok {
			t.Errorf("databaseMetrics names %s, which the daemon does not export", name)
		}
	}
}

// panelSelectors returns the vector selectors of a panel's targets.
func panelSelectors(t *testing.T, p map[string]any) []*parser.VectorSelector {
	t.Helper()
	var out []*parser.VectorSelector
	targets, _ := p["targets"].([]any)
	for _, tg := range targets {
		tm, _ := tg.(map[string]any)
		expr, _ := tm["expr"].(string)
		if expr == "" {
			continue
		}
		e, err := promql.ParseExpr(grafanaVars.ReplaceAllString(expr, "5m"))
		if err != nil {
			continue // reported by TestDashboardQueriesUseExportedMetrics
		}
		parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				out = append(out, vs)
			}
			return nil
		})
	}
	return out
}

// matches reports whether vs keeps series whose label name is value.
func matches(vs *parser.VectorSelector, name, value string) bool {
	for _, m := range vs.LabelMatchers {
		if m.Name == name && !m.Matches(value) {
			return false
		}
	}
	return true
}

// TestDashboardShowsWhatNoBacklogPanelShows: what the backlog panels and
// the lateness gauge cannot show has a panel of its own, and the panels
// say what their numbers mean: databases a fleet cannot drain, rows ending
// failed (a provider answering 500 to everything: outcome retry only),
// retry including the attempt that exhausted a row, and "never" for an
// outbox never vacuumed (the gauge's -1).
func TestDashboardShowsWhatNoBacklogPanelShows(t *testing.T) {
	d := loadDashboard(t)
	var undrainable, failed bool
	for _, p := range panels(d) {
		desc, _ := p["description"].(string)
		for _, vs := range panelSelectors(t, p) {
			switch vs.Name {
			case "drainer_fleet_databases":
				if matches(vs, "state", "unreachable") && matches(vs, "state", "schema_mismatch") && !matches(vs, "state", "known") {
					undrainable = true
				}
			case "drainer_outbox_rows":
				if matches(vs, "status", "failed") && !matches(vs, "status", "pending") {
					failed = true
				}
			case "drainer_dispatch_total":
				if matches(vs, "outcome", "retry") && !strings.Contains(desc, "exhausted") {
					t.Errorf("%s shows outcome retry without saying it includes the attempt that exhausted a row (the row then ends failed)", title(p))
				}
			case "drainer_outbox_last_autovacuum_age_seconds":
				if p["type"] == "timeseries" {
					t.Errorf("%s: a time series draws -1 (never vacuumed) as -1 s on its axis", title(p))
				}
				fc, _ := p["fieldConfig"].(map[string]any)
				def, _ := fc["defaults"].(map[string]any)
				ms, _ := json.Marshal(def["mappings"])
				if !regexp.MustCompile(`"-1":\{[^}]*"text":"never"`).Match(ms) {
					t.Errorf("%s: no value mapping of -1 to never: %s", title(p), ms)
				}
			}
		}
	}
	if !undrainable {
		t.Errorf("no panel shows drainer_fleet_databases{state=~\"unreachable|schema_mismatch\"}: the databases a fleet cannot drain")
	}
	if !failed {
		t.Errorf("no panel shows drainer_outbox_rows{status=\"failed\"} alone: rows ending failed")
	}
}
