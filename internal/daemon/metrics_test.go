package daemon

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/drainer"
	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/tooling/pgtemp"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

// dashboardsDir holds the Grafana dashboards and the alert rules.
const dashboardsDir = "../../dashboards"

// fromElsewhere lists the series the dashboards and rules read that the
// daemon does not export, by design.
var fromElsewhere = map[string]string{
	"up":     "recorded by Prometheus for every target it scrapes",
	"ALERTS": "recorded by Prometheus for every alert pending or firing (the paging rules keep a page while no replica has read a snapshot)",
}

// grafanaIntervals are Grafana's interval variables, which PromQL cannot
// parse; any duration stands in for them.
var grafanaIntervals = regexp.MustCompile(`\$\{?__(rate_interval|interval|range)(_ms|_s)?\}?`)

// templateQuery is a Grafana variable's query around a PromQL expression.
var templateQuery = regexp.MustCompile(`^\s*(?:label_values|query_result)\((.+?)(?:,\s*\w+)?\)\s*$`)

// readMetrics returns the series names that the dashboards (every "expr",
// and every label_values or query_result of a template variable) and the
// alert and recording rules read, each with a file that reads it.
func readMetrics(t *testing.T) map[string]string {
	t.Helper()
	names := map[string]string{}
	add := func(file, expr string) {
		e, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaIntervals.ReplaceAllString(expr, "5m"))
		if err != nil {
			t.Fatalf("%s: %q does not parse: %v", file, expr, err)
		}
		parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				name := vs.Name
				for _, m := range vs.LabelMatchers {
					if name == "" && m.Name == labels.MetricName && m.Type == labels.MatchEqual {
						name = m.Value
					}
				}
				if name == "" {
					t.Fatalf("%s: a selector without a metric name in %q", file, expr)
				}
				names[name] = file
			}
			return nil
		})
	}
	dashboards, err := filepath.Glob(filepath.Join(dashboardsDir, "*.json"))
	if err != nil || len(dashboards) == 0 {
		t.Fatalf("no dashboard in %s (%v)", dashboardsDir, err)
	}
	for _, f := range dashboards {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d any
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var walk func(key string, v any)
		walk = func(key string, v any) {
			switch v := v.(type) {
			case map[string]any:
				for k, x := range v {
					walk(k, x)
				}
			case []any:
				for _, x := range v {
					walk(key, x)
				}
			case string:
				if key == "expr" && v != "" {
					add(f, v)
				} else if m := templateQuery.FindStringSubmatch(v); m != nil && (key == "query" || key == "definition") {
					add(f, m[1])
				}
			}
		}
		walk("", d)
	}
	rules, err := filepath.Glob(filepath.Join(dashboardsDir, "*rules*.yaml"))
	if err != nil || len(rules) == 0 {
		t.Fatalf("no rule file in %s (%v)", dashboardsDir, err)
	}
	for _, f := range rules {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var rf struct {
			Groups []struct {
				Rules []struct {
					Expr string `json:"expr"`
				} `json:"rules"`
			} `json:"groups"`
		}
		if err := yaml.Unmarshal(data, &rf); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				add(f, r.Expr)
			}
		}
	}
	if len(names) < 20 {
		t.Fatalf("only %d metric names read from the dashboards and rules: is the walk broken? %v", len(names), names)
	}
	return names
}

// startupConfig names two adapters with routes and one without, and routes
// the compensation_failed alert.
const startupConfig = `
adapters:
  pay: {type: http, url: "http://127.0.0.1:1/{tool_name}"}
  crm: {type: http, url: "http://127.0.0.1:1/{tool_name}"}
  spare: {type: http, url: "http://127.0.0.1:1/{tool_name}"}
alerts:
  compensation_failed: crm
routes:
  charge_card: {adapter: pay, compensation: refund_card}
  refund_card: {adapter: pay}
  sync_contact: {adapter: crm}
`

// configured are the label values startupConfig must give a series each.
var (
	configuredAdapters = []string{"crm", "pay", "spare"}
	configuredHolds    = []string{"crm/*", "crm/" + outbox.AlertTool, "crm/sync_contact", "pay/*", "pay/charge_card", "pay/refund_card", "spare/*"}
	configuredTools    = []string{"charge_card", outbox.AlertTool, "refund_card", "sync_contact"}
	// gatewayTools: the config has no mcp adapter, so the gateway's series
	// exist for no tool but "" (refused before a tool was known).
	gatewayTools = []string{""}
)

// checkExported checks that every name the dashboards and rules read is a
// family of reg with a series for each configured adapter, route and tool
// where it has such a label; with zero, those series read 0 (but for
// drainer_build_info and drainer_workers, which say what runs).
func checkExported(t *testing.T, phase string, reg *prometheus.Registry, read map[string]string, zero bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("%s: gather: %v", phase, err)
	}
	families := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		families[mf.GetName()] = mf
	}
	for name, file := range read {
		if _, ok := fromElsewhere[name]; ok {
			continue
		}
		if strings.HasPrefix(name, "drainer_fleet_") {
			continue // a fleet's own series: this daemon drains one database (internal/fleet: TestFleetMetricsFromStartup)
		}
		mf := families[name]
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && mf == nil {
				if h := families[base]; h != nil && h.GetType() == dto.MetricType_HISTOGRAM {
					mf = h
				}
			}
		}
		if mf == nil || len(mf.Metric) == 0 {
			t.Errorf("%s: %s (read by %s) has no series", phase, name, filepath.Base(file))
			continue
		}
		have := map[string][]string{}
		for _, m := range mf.Metric {
			lv := map[string]string{}
			for _, l := range m.Label {
				lv[l.GetName()] = l.GetValue()
			}
			if a, ok := lv["adapter"]; ok {
				have["adapter"] = append(have["adapter"], a)
				if r, ok := lv["route"]; ok {
					have["route"] = append(have["route"], a+"/"+r)
				}
			}
			if tool, ok := lv["tool"]; ok {
				have["tool"] = append(have["tool"], tool)
			}
			// The snapshot's age counts from the start until the first
			// snapshot is read (it grows while none is).
			if v := value(m); zero && v != 0 && !strings.HasPrefix(name, "process_") && mf.GetName() != "drainer_build_info" &&
				mf.GetName() != "drainer_workers" && mf.GetName() != "drainer_outbox_snapshot_age_seconds" {
				t.Errorf("%s: %s%v = %v at startup, want 0", phase, mf.GetName(), lv, v)
			}
		}
		tools := configuredTools
		if strings.HasPrefix(mf.GetName(), "drainer_gateway_") {
			// The gateway's tool label names the tools it serves: the
			// routes of mcp adapters (none in this config).
			tools = gatewayTools
		}
		for label, want := range map[string][]string{"adapter": configuredAdapters, "route": configuredHolds, "tool": tools} {
			if _, labelled := have[label]; !labelled {
				continue
			}
			for _, w := range want {
				if !slices.Contains(have[label], w) {
					t.Errorf("%s: %s has no series for %s %q (has %v)", phase, mf.GetName(), label, w, have[label])
				}
			}
		}
	}
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

// TestDashboardMetricsExistFromStartup: every series the dashboards and the
// alert rules read exists as soon as the daemon serves /metrics (while it
// waits for its database), with a series per configured adapter, route and
// routed tool where the family has such a label, each 0 ("No data" on a
// dashboard reads as broken); and still once the engine runs and its
// first backlog snapshot is exported.
func TestDashboardMetricsExistFromStartup(t *testing.T) {
	t.Parallel()
	read := readMetrics(t)
	cfg, err := config.Parse("c.yaml", []byte(startupConfig), config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("waiting for the database", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close() // nothing listens there now
		var logs testkit.Buffer
		reg := prometheus.NewRegistry()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- Run(ctx, Options{Config: cfg, DatabaseURL: "postgres://app@127.0.0.1:" + strconv.Itoa(port) + "/app?sslmode=disable",
				MetricsAddr: "127.0.0.1:0", Registry: reg, Version: "test", Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
		}()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		}()
		testkit.WaitFor(t, 90*time.Second, "the daemon waiting for its database", withLogs(&logs, func() bool { return strings.Contains(logs.String(), "database unreachable") }))
		checkExported(t, "waiting for the database", reg, read, true)
	})

	t.Run("engine running", func(t *testing.T) {
		ctx := t.Context()
		c, err := pgtemp.Start(ctx, pgtemp.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := c.Stop(); err != nil {
				t.Error(err)
			}
		}()
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = migrations.Migrate(ctx, conn, migrations.DefaultSchema, nil)
		_ = conn.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var logs testkit.Buffer
		var eng atomic.Pointer[drainer.Engine]
		reg := prometheus.NewRegistry()
		rctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- Run(rctx, Options{Config: cfg, DatabaseURL: c.URL("postgres"), MetricsAddr: "127.0.0.1:0", Registry: reg,
				Version: "test", Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
				Engine:  drainer.Config{SnapshotInterval: 200 * time.Millisecond},
				Started: func(e *drainer.Engine) { eng.Store(e) }})
		}()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		}()
		testkit.WaitFor(t, 90*time.Second, "the engine's first backlog snapshot", withLogs(&logs, func() bool {
			e := eng.Load()
			if e == nil {
				return false
			}
			_, _, ok := e.Backlog()
			return ok
		}))
		checkExported(t, "engine running", reg, read, false)
	})
}
