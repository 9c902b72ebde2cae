package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/drainer"
	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/internal/daemon"
	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/producer"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/tooling/mockprovider"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Options configure the demo.
type Options struct {
	Out, Err io.Writer
	// Runs is the number of ordinary two-step runs (default 100).
	Runs int
	// Workers for the daemon (default 16).
	Workers int
	// Logger receives the daemon's logs (default: a file in LogDir, named
	// on the first line of Out).
	Logger *slog.Logger
	// LogDir is the directory of the log file (default: a new temporary
	// directory); unused when Logger is set.
	LogDir string
	// Version is reported by the daemon.
	Version string
}

const configTemplate = `# The demo's config: one HTTP adapter (the mock provider) and its routes.
workers: %d
lease: 10s
unrouted_recheck: 1s
adapters:
  provider:
    type: http
    url: %s/{tool_name}
    timeout: 2s
    breaker: {consecutive_failures: 0}
routes:
  charge_card:
    adapter: provider
    max_attempts: 12
    backoff: {base: 50ms, cap: 1s}
    compensation: refund_card
  send_receipt:
    adapter: provider
    max_attempts: 12
    backoff: {base: 50ms, cap: 1s}
  reserve_stock:
    adapter: provider
    max_attempts: 12
    backoff: {base: 50ms, cap: 1s}
    compensation: release_stock
  ship_order:
    adapter: provider
    max_attempts: 12
    backoff: {base: 50ms, cap: 1s}
  sync_legacy_crm:
    adapter: provider
    max_attempts: 12
    backoff: {base: 50ms, cap: 1s}
  refund_card:
    adapter: provider
    max_attempts: 12
    backoff: {base: 50ms, cap: 1s}
  release_stock:
    adapter: provider
    max_attempts: 12
    backoff: {base: 50ms, cap: 1s}
`

// migratedPool migrates the demo's database and opens a pool on it.
func migratedPool(ctx context.Context, dbURL string) (*pgxpool.Pool, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := migrations.Migrate(ctx, conn, migrations.DefaultSchema, nil); err != nil {
		return nil, err
	}
	return pgxpool.New(ctx, dbURL)
}

// Run runs the demo until every row is settled.
func Run(ctx context.Context, opts Options) error {
	opts.Runs = max(opts.Runs, 1)
	if opts.Workers == 0 {
		opts.Workers = 16
	}
	closeLog, err := openLog(&opts, "drainer-demo.log")
	if err != nil {
		return err
	}
	defer closeLog()
	out := opts.Out
	fmt.Fprintln(out, "drainer demo: starting a throwaway Postgres and a mock provider (15% transient failures, ship_order and sync_legacy_crm refused)")

	pg, err := startPostgres(ctx, opts.Logger)
	if err != nil {
		return err
	}
	defer pg.stop()

	provider := mockprovider.New(mockprovider.Config{
		Seed: time.Now().UnixNano(), Fail503: 0.08, Fail429: 0.05, RetryAfterSeconds: 1, Fail529: 0.02,
		TerminalTools: map[string]int{"ship_order": 422, "sync_legacy_crm": 400},
		// One answer lost after the effect: the ambiguous case a retry
		// with the same key settles (a replay, not a second charge).
		LoseAnswer: map[string]bool{lostAnswer.Key(): true},
	})
	providerURL, err := provider.Start("127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("start mock provider: %w", err)
	}
	defer provider.Close()

	dbURL := pg.url
	pool, err := migratedPool(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	st := store.MustNew(migrations.DefaultSchema)
	total, err := enqueueSamples(ctx, pool, st, opts.Runs)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "enqueued %d intents: %d two-step runs, 3 runs calling a refusing CRM, 1 three-step order whose shipping is refused (a saga)\n",
		total, opts.Runs)
	fmt.Fprintf(out, "the provider will charge %s's card and then drop the connection before answering (a lost answer)\n", lostAnswer.AgentRunID)

	cfg, err := config.Parse("demo.yaml", fmt.Appendf(nil, configTemplate, opts.Workers, providerURL), config.LoadOptions{})
	if err != nil {
		return fmt.Errorf("demo config: %w", err)
	}
	reg := prometheus.NewRegistry()
	runCtx, stopDaemon := context.WithCancel(ctx)
	defer stopDaemon()
	daemonErr := make(chan error, 1)
	go func() {
		daemonErr <- daemon.Run(runCtx, daemon.Options{
			Config: cfg, DatabaseURL: dbURL, Schema: migrations.DefaultSchema, MetricsAddr: "127.0.0.1:0",
			ShutdownTimeout: 5 * time.Second, Logger: opts.Logger, Version: opts.Version, Registry: reg,
			Engine: drainer.Config{PollInterval: 100 * time.Millisecond, SagaInterval: 200 * time.Millisecond},
		})
	}()

	start := time.Now()
	settled, err := watch(ctx, pool, st, opts.Err, daemonErr)
	elapsed := time.Since(start)
	stopDaemon()
	if derr := <-daemonErr; derr != nil && err == nil {
		err = fmt.Errorf("daemon: %w", derr)
	}
	if err != nil {
		return err
	}
	return summary(ctx, out, pool, st, provider, reg, total, settled, elapsed)
}

// lostAnswer is the intent whose first answer the mock provider drops after
// applying the effect (the first ordinary run's charge).
var lostAnswer = idemkey.Tuple{AgentRunID: "run-000", StepID: "charge", ToolName: "charge_card", BusinessScope: "invoice:inv_000"}

// watch shows progress until every row is settled and every saga is done.
func watch(ctx context.Context, pool *pgxpool.Pool, st *store.Store, w io.Writer, daemonErr <-chan error) (int, error) {
	// A progress bar on a terminal; a line a second otherwise (CI logs).
	f, isFile := w.(*os.File)
	tty := isFile && term.IsTerminal(int(f.Fd()))
	bar := progressbar.NewOptions(-1, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription("draining"),
		progressbar.OptionShowCount(), progressbar.OptionSetWidth(30), progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(), progressbar.OptionSetVisibility(tty))
	lastLine := time.Time{}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		p, err := st.ReadProgress(ctx, pool)
		if err != nil {
			return 0, fmt.Errorf("progress: %w", err)
		}
		total, settled, openSagas := p.Total, p.Settled, p.OpenSagas
		bar.ChangeMax(total)
		_ = bar.Set(settled)
		if !tty && time.Since(lastLine) >= time.Second {
			fmt.Fprintf(w, "draining: %d of %d rows settled, %d sagas open\n", settled, total, openSagas)
			lastLine = time.Now()
		}
		if settled == total && openSagas == 0 {
			_ = bar.Finish()
			fmt.Fprintf(w, "draining: all %d rows settled\n", total)
			return settled, nil
		}
		if time.Now().After(deadline) {
			return settled, fmt.Errorf("demo did not settle within 3 minutes (%d of %d rows settled)", settled, total)
		}
		select {
		case <-ctx.Done():
			return settled, ctx.Err()
		case err := <-daemonErr:
			if err == nil {
				err = errors.New("daemon stopped early")
			}
			return settled, err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// enqueueSamples writes the demo's intents as an agent would.
func enqueueSamples(ctx context.Context, pool *pgxpool.Pool, st *store.Store, runs int) (int, error) {
	var ins []producer.Intent
	add := func(run, step, tool, scope, payload string) {
		ins = append(ins, producer.Intent{Tuple: idemkey.Tuple{AgentRunID: run, StepID: step, ToolName: tool, BusinessScope: scope}, Payload: []byte(payload)})
	}
	for i := range runs {
		run := fmt.Sprintf("run-%03d", i)
		add(run, "charge", "charge_card", fmt.Sprintf("invoice:inv_%03d", i), fmt.Sprintf(`{"amount": %d, "currency": "eur"}`, 1000+i))
		add(run, "receipt", "send_receipt", fmt.Sprintf("customer:cus_%03d", i), `{"template": "receipt"}`)
	}
	for i := range 3 {
		add(fmt.Sprintf("crm-%d", i), "sync", "sync_legacy_crm", "account:acme", `{"fields": ["email"]}`)
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := producer.EnqueueBatchTx(ctx, tx, ins); err != nil {
			return err
		}
		// The saga: an order whose steps the agent records one after another.
		saga := []producer.Intent{
			{Tuple: idemkey.Tuple{AgentRunID: "order-42", StepID: "1-charge", ToolName: "charge_card", BusinessScope: "order:42"}, Payload: []byte(`{"amount": 4200, "currency": "eur"}`)},
			{Tuple: idemkey.Tuple{AgentRunID: "order-42", StepID: "2-reserve", ToolName: "reserve_stock", BusinessScope: "order:42"}, Payload: []byte(`{"sku": "BOOK-1", "qty": 1}`)},
			{Tuple: idemkey.Tuple{AgentRunID: "order-42", StepID: "3-ship", ToolName: "ship_order", BusinessScope: "order:42"}, Payload: []byte(`{"address": "nowhere"}`)},
		}
		res, err := producer.EnqueueBatchTx(ctx, tx, saga)
		if err != nil {
			return err
		}
		// Step i is due i × 1.5 s from now, so the order's steps go out in turn.
		keys, in := make([]string, len(res)), make([]time.Duration, len(res))
		for i, r := range res {
			keys[i], in[i] = r.Key, time.Duration(i)*1500*time.Millisecond
		}
		return st.Reschedule(ctx, tx, keys, in)
	})
	return len(ins) + 3, err
}

func summary(ctx context.Context, out io.Writer, pool *pgxpool.Pool, st *store.Store, p *mockprovider.Provider,
	reg prometheus.Gatherer, enqueued, settled int, elapsed time.Duration) error {
	counts, err := st.CountByStatusKind(ctx, pool)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "STATUS\tKIND\tROWS\tATTEMPTS\n")
	for _, c := range counts {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", c.Status, c.Kind, c.Rows, c.Attempts)
	}
	_ = tw.Flush()

	rows, err := st.RunRows(ctx, pool, "order-42", 100)
	if err != nil {
		return err
	}
	steps := make([]string, len(rows))
	var undo []string
	for i, r := range rows {
		steps[i] = fmt.Sprintf("%s %s %s", r.StepID, r.ToolName, r.Status)
		if r.Kind == outbox.KindCompensation {
			undo = append(undo, fmt.Sprintf("%s undoing %s", r.ToolName, r.StepID))
		}
	}
	compensations := 0
	for _, c := range counts {
		if c.Kind == outbox.KindCompensation {
			compensations += c.Rows
		}
	}
	fmt.Fprintf(out, "\n%d rows: the %d enqueued intents and %d compensation rows, added by the saga of order-42 when its shipping was refused:\n  %s\n",
		settled, enqueued, compensations, strings.Join(undo, ", "))
	fmt.Fprintf(out, "saga order-42: %s\n", strings.Join(steps, ", "))
	stats := p.Snapshot()
	fmt.Fprintf(out, "provider: %d requests, %d effects, %d replays, %d injected transient failures (503/429/529), %d refused\n",
		stats.Requests, stats.Effects, stats.Replays, stats.Unavailable+stats.RateLimited+stats.Overloaded, stats.Terminal)
	replays, err := dispatchCount(reg, "replay")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "lost answers: %d: %s's charge was applied, then the connection dropped before the answer; the retry with the same key\n"+
		"  got Idempotency-Replay: true and counted as a replay (drainer_dispatch_total{outcome=\"replay\"}: %d); effects for that key: %d\n",
		stats.Resets, lostAnswer.AgentRunID, replays, p.Effects(lostAnswer.Key()))
	dups := p.DuplicateEffects()
	fmt.Fprintf(out, "duplicate effects at the provider: %d; tuples sent under two keys: %d\n", len(dups), len(p.MultiKeyTuples()))
	fmt.Fprintf(out, "settled %d rows in %s\n", settled, elapsed.Round(10*time.Millisecond))
	if len(dups) > 0 || len(p.MultiKeyTuples()) > 0 {
		return fmt.Errorf("the provider saw a duplicate effect: %s", strings.Join(dups, ", "))
	}
	return nil
}

// dispatchCount sums drainer_dispatch_total over adapters for outcome.
func dispatchCount(reg prometheus.Gatherer, outcome string) (int, error) {
	families, err := reg.Gather()
	if err != nil {
		return 0, fmt.Errorf("read the daemon's metrics: %w", err)
	}
	n := 0.0
	for _, f := range families {
		if f.GetName() != "drainer_dispatch_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return int(n), nil
}
