package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/drainer-io/drainer/receiver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "receiver-example:", err)
		os.Exit(1)
	}
}

// config is the parsed command line.
type config struct {
	addr, mode, schema, dbURL string
	delay, recoveryTimeout    time.Duration
	outsideTx, rerunAbandoned bool
}

func parse(args []string) (config, error) {
	var c config
	defAddr := os.Getenv("ADDR")
	if defAddr == "" {
		port := os.Getenv("PORT")
		if port == "" {
			port = "8080"
		}
		defAddr = net.JoinHostPort("127.0.0.1", port)
	}
	fs := flag.NewFlagSet("receiver-example", flag.ContinueOnError)
	fs.StringVar(&c.addr, "addr", defAddr, "listen address")
	fs.StringVar(&c.mode, "mode", string(receiver.ModeSeed), "receiver mode: seed or ietf")
	fs.StringVar(&c.schema, "schema", receiver.DefaultSchema, "schema of the receiver's records")
	fs.DurationVar(&c.delay, "delay", 0, "hold each order this long after writing it, before answering")
	inTx := fs.Bool("in-transaction", true, "insert the order in the transaction that writes the receiver's record (the default)")
	fs.BoolVar(&c.outsideTx, "outside-transaction", false, "insert the order on its own connection, outside the receiver's transaction")
	fs.BoolVar(&c.rerunAbandoned, "rerun-abandoned", false, "outside a transaction: run an order again whose process died mid-request")
	fs.DurationVar(&c.recoveryTimeout, "recovery-timeout", receiver.DefaultRecoveryTimeout, "how long a dead process's record blocks retries")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.outsideTx && *inTx && isSet(fs, "in-transaction") {
		return c, errors.New("-in-transaction and -outside-transaction contradict each other")
	}
	c.dbURL = os.Getenv("DATABASE_URL")
	if c.dbURL == "" {
		return c, errors.New("set DATABASE_URL to a postgres:// URL")
	}
	return c, nil
}

// isSet reports whether the command line set flag name.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// run serves until ctx is done.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	c, err := parse(args)
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, c.dbURL)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	defer pool.Close()

	// The order is written through receiver.Tx in the transaction that
	// writes the receiver's record: a crash mid-request rolls back both, and
	// the retry makes the order once.
	reg := prometheus.NewRegistry()
	// -delay holds the transaction idle: a delay of a minute or more would
	// outlast the receiver's default idle-in-transaction timeout.
	var idle time.Duration
	if c.delay >= receiver.DefaultIdleInTransactionTimeout {
		idle = c.delay + receiver.DefaultIdleInTransactionTimeout
	}
	rc, err := receiver.New(pool, receiver.Options{
		Schema:          c.schema,
		Mode:            receiver.Mode(c.mode),
		Scope:           func(r *http.Request) string { return r.Header.Get("X-Account") },
		InTransaction:   !c.outsideTx,
		RerunAbandoned:  c.rerunAbandoned,
		RecoveryTimeout: c.recoveryTimeout,
		Registerer:      reg,

		IdleInTransactionTimeout: idle,
	})
	if err != nil {
		return err
	}
	if err := rc.Migrate(ctx); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS example_orders (
		id bigserial PRIMARY KEY, account text NOT NULL, body jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("create table example_orders: %w", err)
	}

	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("POST /v1/orders", func(w http.ResponseWriter, r *http.Request) { createOrder(w, r, pool, c.delay) })
	mux.HandleFunc("GET /v1/orders/count", func(w http.ResponseWriter, r *http.Request) {
		var n int64
		if err := pool.QueryRow(r.Context(), `SELECT count(*) FROM example_orders`).Scan(&n); err != nil {
			http.Error(w, "database error", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"count":%d}`, n)
	})

	l, err := net.Listen("tcp", c.addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: rc.Wrap(mux), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "listening on http://%s\n", l.Addr())

	// Expired records are pruned hourly.
	pruneCtx, stopPrune := context.WithCancel(ctx)
	defer stopPrune()
	go func() { _ = rc.RunPruner(pruneCtx, time.Hour, nil) }()

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return srv.Shutdown(shutCtx)
	}
}

// createOrder stores the JSON body as an order and answers 201.
func createOrder(w http.ResponseWriter, r *http.Request, pool *pgxpool.Pool, delay time.Duration) {
	body, err := io.ReadAll(r.Body)
	if err != nil || !json.Valid(body) {
		http.Error(w, "the body must be JSON", http.StatusBadRequest)
		return
	}
	var q interface {
		QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	} = pool
	if tx := receiver.Tx(r.Context()); tx != nil {
		q = tx
	}
	var id int64
	if err := q.QueryRow(r.Context(), `INSERT INTO example_orders (account, body) VALUES ($1, $2) RETURNING id`,
		r.Header.Get("X-Account"), string(body)).Scan(&id); err != nil {
		http.Error(w, "database error", http.StatusServiceUnavailable)
		return
	}
	if delay > 0 {
		// The order exists now. The receiver does not cancel r.Context()
		// when the client leaves, so the order is committed and answered
		// (and its retry replayed) after the delay either way.
		time.Sleep(delay)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/v1/orders/"+strconv.FormatInt(id, 10))
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":%d,"order":%s}`, id, body)
}
