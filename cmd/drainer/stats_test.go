package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestStatsCommand: rows in several statuses and tools are counted by
// status and by tool, a tool with due pending rows has an oldest pending
// age, and rows settled a moment ago count in the rates; as a table and
// as JSON.
func TestStatsCommand(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t)
	card := d.enqueue("run-1", "charge_card", 4)
	mail := d.enqueue("run-2", "send_email", 3)
	d.enqueue("run-3", "lookup", 1)
	d.set(card[0], "succeeded", 1)
	d.set(card[1], "succeeded", 1)
	d.set(mail[0], "succeeded", 1)
	d.set(mail[1], "outcome_unknown", 1)
	// settled long ago: in the counts, not in the rates
	d.exec(`UPDATE drainer.outbox SET status = 'succeeded', attempts = 1, updated_at = now() - interval '1 hour' WHERE key = $1`, mail[2])
	// backing off: pending but not due, so no age for its tool
	d.exec(`UPDATE drainer.outbox SET next_attempt_at = now() + interval '1 hour' WHERE tool_name = 'lookup'`)
	// due for a while
	d.exec(`UPDATE drainer.outbox SET next_attempt_at = now() - interval '90 seconds' WHERE key = $1`, card[2])

	code, out, errb := d.run("stats")
	want(t, code, errb, 0)
	for _, re := range []string{
		`(?m)^pending +3$`, `(?m)^succeeded +4$`, `(?m)^outcome_unknown +1$`, `(?m)^failed +0$`,
		`(?m)^charge_card +2 +0 +0 +0 +1m3\ds$`,
		`(?m)^send_email +0 +0 +1 +0 +-$`,
		`(?m)^lookup +1 +0 +0 +0 +-$`,
		`(?m)^oldest pending age: 1m3\ds `,
		`(?m)^last 1m +3 +0 +1 +0 +0 +0 +4 +0\.07$`,
		`(?m)^last 5m +3 +0 +1 +0 +0 +0 +4 +0\.01$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("table lacks %s:\n%s", re, out)
		}
	}
	for _, section := range strings.Split(strings.TrimSpace(out), "\n\n") {
		lines := strings.Split(section, "\n")
		if strings.HasPrefix(lines[len(lines)-1], "oldest pending age") {
			section = strings.Join(lines[:len(lines)-1], "\n")
		}
		checkAligned(t, section)
	}

	code, out, errb = d.run("stats", "--output", "json")
	want(t, code, errb, 0)
	var st struct {
		MeasuredAt   string           `json:"measured_at"`
		RowsByStatus map[string]int64 `json:"rows_by_status"`
		RowsByTool   []struct {
			ToolName string `json:"tool_name"`
			Status   string `json:"status"`
			Rows     int64  `json:"rows"`
		} `json:"rows_by_tool"`
		OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
		OldestPendingByTool     []struct {
			ToolName                string  `json:"tool_name"`
			OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
		} `json:"oldest_pending_by_tool"`
		Settled []struct {
			WindowSeconds int64            `json:"window_seconds"`
			RowsByStatus  map[string]int64 `json:"rows_by_status"`
			Rows          int64            `json:"rows"`
			RowsPerSecond float64          `json:"rows_per_second"`
		} `json:"settled"`
	}
	decode(t, out, &st)
	wantStatus := map[string]int64{"pending": 3, "in_flight": 0, "succeeded": 4, "failed": 0, "outcome_unknown": 1,
		"compensated": 0, "compensation_failed": 0, "cancelled": 0}
	for k, v := range wantStatus {
		if n, ok := st.RowsByStatus[k]; !ok || n != v {
			t.Errorf("rows_by_status[%s] = %d (present %v), want %d", k, n, ok, v)
		}
	}
	byTool := map[string]int64{}
	for _, tc := range st.RowsByTool {
		byTool[tc.ToolName+"/"+tc.Status] = tc.Rows
	}
	if len(byTool) != 3 || byTool["charge_card/pending"] != 2 || byTool["send_email/outcome_unknown"] != 1 || byTool["lookup/pending"] != 1 {
		t.Errorf("rows_by_tool = %+v", st.RowsByTool)
	}
	if len(st.OldestPendingByTool) != 1 || st.OldestPendingByTool[0].ToolName != "charge_card" ||
		st.OldestPendingByTool[0].OldestPendingAgeSeconds < 90 || st.OldestPendingAgeSeconds != st.OldestPendingByTool[0].OldestPendingAgeSeconds {
		t.Errorf("oldest pending: %v overall, by tool %+v", st.OldestPendingAgeSeconds, st.OldestPendingByTool)
	}
	if len(st.Settled) != 2 || st.Settled[0].WindowSeconds != 60 || st.Settled[1].WindowSeconds != 300 {
		t.Fatalf("settled = %+v", st.Settled)
	}
	for _, s := range st.Settled {
		if s.Rows != 4 || s.RowsByStatus["succeeded"] != 3 || s.RowsByStatus["outcome_unknown"] != 1 ||
			s.RowsPerSecond != 4/float64(s.WindowSeconds) {
			t.Errorf("settled in %ds = %+v", s.WindowSeconds, s)
		}
	}
	if st.MeasuredAt == "" {
		t.Error("no measured_at")
	}
}

// TestStatsNoDuePendingRow: with no due pending row (none at all, or only
// rows backing off) the table's oldest pending age is 0s, as the JSON's
// oldest_pending_age_seconds is 0, never a blank.
func TestStatsNoDuePendingRow(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t)
	check := func(when string) {
		t.Helper()
		code, out, errb := d.run("stats")
		want(t, code, errb, 0)
		if !regexp.MustCompile(`(?m)^oldest pending age: 0s \(due pending rows, since next_attempt_at\)$`).MatchString(out) {
			t.Errorf("%s: table lacks oldest pending age: 0s:\n%s", when, out)
		}
		code, out, errb = d.run("stats", "--output", "json")
		want(t, code, errb, 0)
		var st struct {
			Age *float64 `json:"oldest_pending_age_seconds"`
		}
		decode(t, out, &st)
		if st.Age == nil || *st.Age != 0 {
			t.Errorf("%s: oldest_pending_age_seconds = %v, want 0", when, st.Age)
		}
	}
	check("no rows")
	d.enqueue("run-1", "lookup", 1)
	d.exec(`UPDATE drainer.outbox SET next_attempt_at = now() + interval '1 hour'`)
	check("a row backing off")
}

// TestStatsErrors: a schema never migrated and an unreachable database
// are runtime errors naming what and where; --config alone is a usage
// error.
func TestStatsErrors(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t)
	code, _, errb := d.run("stats", "--schema", "nowhere")
	want(t, code, errb, 1, `schema "nowhere" is not migrated`)
	code, _, errb = runCLI("stats", "--database-url", "postgres://127.0.0.1:1/x?connect_timeout=2")
	want(t, code, errb, 1, "connect", "127.0.0.1")
	code, _, errb = runCLI("stats", "--config", "x.yaml")
	want(t, code, errb, 2, "--all")
	code, _, errb = runCLI("stats", "--all")
	want(t, code, errb, 2, "--all needs --config")
	code, _, errb = runCLI("stats", "--database-url", "postgres://x", "--output", "yaml")
	want(t, code, errb, 2, `--output: "yaml"`)
}

// TestStatsAll: with --all, each database of the config gets its line
// and figures, the total sums them, and a database that cannot be
// measured is named with its error and makes the command exit 1.
func TestStatsAll(t *testing.T) {
	t.Parallel()
	a, b := newOpsDB(t), newOpsDB(t)
	a.enqueue("run-1", "charge_card", 2)
	b.enqueue("run-2", "send_email", 3)
	dir := t.TempDir()
	cfg := writeTemp(t, dir, "drainer.yaml", `
databases:
  static:
    - {name: tenant-a, url: "`+a.url+`"}
    - {name: tenant-b, url: "`+b.url+`"}
    - {name: tenant-c, url: "`+unreachableURL+`"}
`)
	code, out, errb := runCLI("stats", "--all", "--config", cfg)
	want(t, code, errb, 1, "stats --all: 1 of 3 databases could not be measured (tenant-c)")
	for _, re := range []string{`(?m)^tenant-a +2 +0 `, `(?m)^tenant-b +3 +0 `, `(?m)^tenant-c +- .*connect`, `(?m)^TOTAL +5 +0 `} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("table lacks %s:\n%s", re, out)
		}
	}
	if strings.Contains(out, a.url) || strings.Contains(errb, b.url) {
		t.Errorf("a url is shown:\n%s\n%s", out, errb)
	}
	code, out, errb = runCLI("stats", "--all", "--config", cfg, "--output", "json")
	want(t, code, errb, 1, "tenant-c")
	var fs struct {
		RowsByStatus   map[string]int64 `json:"rows_by_status"`
		RowsByDatabase []struct {
			Database     string           `json:"database"`
			RowsByStatus map[string]int64 `json:"rows_by_status"`
			Error        string           `json:"error"`
		} `json:"rows_by_database"`
	}
	decode(t, out, &fs)
	if fs.RowsByStatus["pending"] != 5 || len(fs.RowsByDatabase) != 3 ||
		fs.RowsByDatabase[0].Database != "tenant-a" || fs.RowsByDatabase[0].RowsByStatus["pending"] != 2 ||
		fs.RowsByDatabase[1].Database != "tenant-b" || fs.RowsByDatabase[1].RowsByStatus["pending"] != 3 ||
		fs.RowsByDatabase[2].Database != "tenant-c" || fs.RowsByDatabase[2].Error == "" {
		t.Errorf("json:\n%s", out)
	}
}
