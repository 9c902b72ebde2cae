package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/internal/catalog"
	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/ops"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/spf13/cobra"
)

// statsParallel is how many databases `stats --all` measures at once.
const statsParallel = 4

func newStatsCmd() *cobra.Command {
	var o opFlags
	var all bool
	cmd := &cobra.Command{
		Use:   "stats [--all --config FILE]",
		Short: "Show the backlog by status and tool, the oldest due row, and the drain rate",
		Long: `Show the backlog of one database: rows by status, the rows that hold work
by tool, the oldest due pending row (now - min(next_attempt_at), the figure
of drainer_outbox_oldest_pending_age_seconds) overall and per tool, and the
rows settled (last changed into a terminal or parked status) in the last
minute and the last 5 minutes, with their rate per second. Every figure is
read now, in one snapshot of the database, through the queue's indexes;
past 1,000,000 rows the terminal statuses are planner estimates (marked ~).

With --all and --config FILE, every database of the config's databases:
section (static entries and catalog rows) is measured, and the table has one
line per database and their total; a database that cannot be measured is
named with its error and the command exits 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if all {
				return statsAll(cmd, &o)
			}
			if o.g.configPath != "" && o.g.database == "" && o.g.databaseURL == "" {
				return usagef("--config: give --all for every database of its databases: section, or --database NAME for one")
			}
			c, done, err := o.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			st, err := c.Stats(cmd.Context())
			if err != nil {
				return err
			}
			if o.json() {
				return writeJSON(cmd.OutOrStdout(), st)
			}
			printStats(cmd.OutOrStdout(), st)
			return nil
		},
	}
	addOpFlags(cmd, &o)
	cmd.Flags().BoolVar(&all, "all", false, "measure every database of the config's databases: section (needs --config)")
	return cmd
}

// fleetStats is the answer of `stats --all`: the totals of every database
// measured, and each database's figures (or error) in the config's order.
type fleetStats struct {
	RowsByStatus            map[string]int64 `json:"rows_by_status"`
	OldestPendingAgeSeconds float64          `json:"oldest_pending_age_seconds"`
	Settled                 []ops.Settled    `json:"settled"`
	RowsByDatabase          dbStatsList      `json:"rows_by_database"`
	// Error is why the catalog could not be read.
	Error string `json:"error,omitempty"`
}

// dbStatsList is each database's figures; one that could not be measured
// is only its name and error in JSON.
type dbStatsList []*ops.Stats

func (l dbStatsList) MarshalJSON() ([]byte, error) {
	type failed struct {
		Database string `json:"database"`
		Error    string `json:"error"`
	}
	out := make([]any, len(l))
	for i, st := range l {
		if st.Error != "" {
			out[i] = failed{st.Database, st.Error}
		} else {
			out[i] = st
		}
	}
	return json.Marshal(out)
}

// statsAll runs `stats --all`.
func statsAll(cmd *cobra.Command, o *opFlags) error {
	switch {
	case o.g.configPath == "":
		return usagef("--all needs --config FILE (the config whose databases: section lists the databases)")
	case givenHere(cmd, "database") || givenHere(cmd, "database-url"):
		return usagef("--all measures every database of --config: leave out --database and --database-url")
	}
	// DRAINER_DATABASE_URL (or DRAINER_DATABASE), set for the other
	// commands, says nothing of the databases of --all.
	o.g.database, o.g.databaseURL = "", ""
	if err := o.checkOutput(); err != nil {
		return err
	}
	if err := o.g.validateSchema(); err != nil {
		return err
	}
	dbs, err := loadDatabases(o.g.configPath)
	if err != nil {
		return err
	}
	ctx, log := cmd.Context(), cmdLogger(cmd)
	targets, catalogErr := migrateTargets(ctx, dbs, log)
	fs := fleetStats{RowsByStatus: map[string]int64{}, RowsByDatabase: make(dbStatsList, len(targets))}
	if catalogErr != nil {
		fs.Error = "the catalog could not be read: " + oneLine(catalogErr)
	}
	sem := make(chan struct{}, statsParallel)
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			err := t.err
			var st *ops.Stats
			if err == nil {
				st, err = statsOne(ctx, t.url, o.g.schema)
			}
			if err != nil {
				st = &ops.Stats{Error: oneLine(err)}
			}
			st.Database = t.name
			fs.RowsByDatabase[i] = st
		})
	}
	wg.Wait()
	fs.Settled = []ops.Settled{}
	var failed []string
	for _, st := range fs.RowsByDatabase {
		if st.Error != "" {
			failed = append(failed, st.Database)
			continue
		}
		fs.add(st)
	}
	out := cmd.OutOrStdout()
	if o.json() {
		if err := writeJSON(out, fs); err != nil {
			return err
		}
	} else {
		printFleetStats(out, &fs)
	}
	if len(failed) > 0 || catalogErr != nil {
		what := fmt.Sprintf("%d of %d databases could not be measured", len(failed), len(targets))
		if len(failed) > 0 {
			what += " (" + strings.Join(failed, ", ") + ")"
		}
		if catalogErr != nil {
			what += "; the catalog could not be read"
		}
		return fmt.Errorf("stats --all: %s", what)
	}
	return nil
}

// add sums one database's figures into the totals.
func (fs *fleetStats) add(st *ops.Stats) {
	for k, v := range st.RowsByStatus {
		fs.RowsByStatus[k] += v
	}
	fs.OldestPendingAgeSeconds = max(fs.OldestPendingAgeSeconds, st.OldestPendingAgeSeconds)
	if len(fs.Settled) == 0 {
		for _, s := range st.Settled {
			fs.Settled = append(fs.Settled, ops.Settled{WindowSeconds: s.WindowSeconds, RowsByStatus: map[string]int64{}})
		}
	}
	for i, s := range st.Settled {
		for k, v := range s.RowsByStatus {
			fs.Settled[i].RowsByStatus[k] += v
		}
		fs.Settled[i].Rows += s.Rows
		fs.Settled[i].RowsPerSecond += s.RowsPerSecond
	}
}

// statsOne measures one database of `stats --all`. Its errors hold no url.
func statsOne(ctx context.Context, url config.Secret, schema string) (*ops.Stats, error) {
	cctx, cancel := context.WithTimeout(ctx, migrateConnectTimeout)
	conn, err := catalog.Connect(cctx, url, "drainer-stats")
	cancel()
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := migrations.Check(ctx, conn, schema); err != nil {
		return nil, err
	}
	st, err := store.New(schema)
	if err != nil {
		return nil, err
	}
	return ops.New(conn, st).Stats(ctx)
}

// workStatuses are the columns of the by-tool table.
var workStatuses = []outbox.Status{outbox.StatusPending, outbox.StatusInFlight, outbox.StatusOutcomeUnknown, outbox.StatusCompensationFailed}

// printStats prints one database's figures as three tables.
func printStats(w io.Writer, st *ops.Stats) {
	t := newTable(w, "STATUS", "ROWS")
	for _, s := range outbox.Statuses {
		t.row(string(s), fmtCount(st.RowsByStatus[string(s)], slices.Contains(st.Estimated, s)))
	}
	_ = t.flush()
	fmt.Fprintln(w)

	byTool := map[string]map[outbox.Status]int64{}
	age := map[string]float64{}
	var tools []string
	for _, tc := range st.RowsByTool {
		if byTool[tc.Tool] == nil {
			byTool[tc.Tool] = map[outbox.Status]int64{}
			tools = append(tools, tc.Tool)
		}
		byTool[tc.Tool][tc.Status] += tc.Rows
	}
	for _, ta := range st.OldestPendingByTool {
		age[ta.Tool] = ta.AgeSeconds
	}
	if len(tools) == 0 {
		fmt.Fprintln(w, "no rows hold work")
	} else {
		slices.Sort(tools)
		t = newTable(w, "TOOL", "PENDING", "IN_FLIGHT", "OUTCOME_UNKNOWN", "COMPENSATION_FAILED", "OLDEST_PENDING_AGE")
		for _, tool := range tools {
			cells := []string{trunc(tool, 40)}
			for _, s := range workStatuses {
				cells = append(cells, strconv.FormatInt(byTool[tool][s], 10))
			}
			t.row(append(cells, fmtAge(age[tool]))...)
		}
		_ = t.flush()
	}
	// No due pending row: 0s, as oldest_pending_age_seconds (and the
	// gauge) say 0.
	fmt.Fprintf(w, "oldest pending age: %s (due pending rows, since next_attempt_at)\n\n", cmp.Or(fmtAge(st.OldestPendingAgeSeconds), "0s"))
	printSettled(w, st.Settled)
}

// printSettled prints the rows settled per window and their rate.
func printSettled(w io.Writer, settled []ops.Settled) {
	header := []string{"SETTLED"}
	for _, s := range store.SettledStatuses {
		header = append(header, strings.ToUpper(string(s)))
	}
	t := newTable(w, append(header, "ROWS", "ROWS_PER_SECOND")...)
	for _, s := range settled {
		cells := []string{"last " + fmtWindow(s.WindowSeconds)}
		for _, status := range store.SettledStatuses {
			cells = append(cells, strconv.FormatInt(s.RowsByStatus[string(status)], 10))
		}
		t.row(append(cells, strconv.FormatInt(s.Rows, 10), fmtRate(s.RowsPerSecond))...)
	}
	_ = t.flush()
}

// printFleetStats prints `stats --all`: a line per database and the total.
func printFleetStats(w io.Writer, fs *fleetStats) {
	header := []string{"DATABASE"}
	for _, s := range outbox.Statuses {
		header = append(header, strings.ToUpper(string(s)))
	}
	header = append(header, "OLDEST_PENDING_AGE")
	for _, win := range ops.StatsWindows {
		header = append(header, "SETTLED_PER_SECOND_"+strings.ToUpper(fmtWindow(int64(win/time.Second))))
	}
	t := newTable(w, append(header, "ERROR")...)
	line := func(name string, rows map[string]int64, estimated []outbox.Status, age float64, settled []ops.Settled, errText string) {
		cells := []string{trunc(name, 40)}
		for _, s := range outbox.Statuses {
			if errText != "" {
				cells = append(cells, "")
				continue
			}
			cells = append(cells, fmtCount(rows[string(s)], slices.Contains(estimated, s)))
		}
		if errText != "" {
			cells = append(cells, "")
		} else {
			cells = append(cells, fmtAge(age))
		}
		for i := range ops.StatsWindows {
			if i < len(settled) {
				cells = append(cells, fmtRate(settled[i].RowsPerSecond))
			} else {
				cells = append(cells, "")
			}
		}
		t.row(append(cells, trunc(errText, 100))...)
	}
	var estimated []outbox.Status
	for _, st := range fs.RowsByDatabase {
		line(st.Database, st.RowsByStatus, st.Estimated, st.OldestPendingAgeSeconds, st.Settled, st.Error)
		estimated = append(estimated, st.Estimated...)
	}
	line("TOTAL", fs.RowsByStatus, estimated, fs.OldestPendingAgeSeconds, fs.Settled, "")
	_ = t.flush()
	if fs.Error != "" {
		fmt.Fprintln(w, "catalog: error:", fs.Error)
	}
}

// fmtCount formats a row count, ~ marking a planner estimate.
func fmtCount(n int64, estimated bool) string {
	s := strconv.FormatInt(n, 10)
	if estimated {
		return "~" + s
	}
	return s
}

// fmtAge formats an age in seconds: to the millisecond under a second,
// else to the second; 0 (no due pending row) is "", which a table cell
// shows as "-".
func fmtAge(seconds float64) string {
	if seconds <= 0 {
		return ""
	}
	d := time.Duration(seconds * float64(time.Second))
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// fmtWindow formats a window of whole seconds: 1m, 5m, 90s.
func fmtWindow(seconds int64) string {
	if seconds%60 == 0 {
		return strconv.FormatInt(seconds/60, 10) + "m"
	}
	return strconv.FormatInt(seconds, 10) + "s"
}

// fmtRate formats rows per second.
func fmtRate(r float64) string { return strconv.FormatFloat(r, 'f', 2, 64) }
