// Command kafka-consumer reads the records drainer's kafka adapter writes
// and applies each row's effect once, deduplicating on the record's
// Idempotency-Key header, in the manner of a Debezium outbox consumer.
//
// Kafka does not deduplicate across producer sessions: when drainer loses
// an acknowledgement and a restarted process (or another replica) sends the
// row again, the topic holds two records with the same Idempotency-Key.
// Consumers also see records again after a rebalance or a crash before the
// commit of their offsets. Both are harmless when the consumer remembers
// the keys it has applied, in the same transaction as the effect.
//
// Usage:
//
//	kafka-consumer -brokers localhost:9092 -topic agent.order_created -group orders-projector \
//	    [-database-url postgres://...]
//
// Without -database-url the applied keys are kept in memory (a demo: a
// restart forgets them); with it, in the table kafka_consumer.applied_keys,
// inserted in the transaction that applies the effect.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
)

// headerIdempotencyKey is the header drainer puts on every record: the
// row's idempotency key, the same on every copy of the row.
const headerIdempotencyKey = "Idempotency-Key"

func main() {
	brokers := flag.String("brokers", envOr("KAFKA_BROKERS", "localhost:9092"), "comma-separated seed brokers (host:port)")
	topic := flag.String("topic", "agent.order_created", "topic to read")
	group := flag.String("group", "orders-projector", "consumer group")
	dbURL := flag.String("database-url", os.Getenv("DATABASE_URL"), "Postgres URL for the applied keys (in memory when empty)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var d Deduper = NewMemoryDeduper()
	if *dbURL != "" {
		pool, err := pgxpool.New(ctx, *dbURL)
		if err != nil {
			log.Error("database", "err", err)
			os.Exit(1)
		}
		defer pool.Close()
		pd, err := NewPostgresDeduper(ctx, pool)
		if err != nil {
			log.Error("database", "err", err)
			os.Exit(1)
		}
		d = pd
	}
	apply := func(_ context.Context, _ pgx.Tx, r *kgo.Record) error {
		// The effect: here a log line; in a real consumer, a write through
		// tx (when not nil) so that it commits with the applied key.
		log.Info("applied", "topic", r.Topic, "aggregate", string(r.Key), "key", header(r, headerIdempotencyKey), "bytes", len(r.Value))
		return nil
	}
	err := Consume(ctx, Config{Brokers: strings.Split(*brokers, ","), Topic: *topic, Group: *group}, d, apply, log)
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Error("consume", "err", err)
		os.Exit(1)
	}
}

// Config says where to read.
type Config struct {
	Brokers []string
	Topic   string
	Group   string
	// Opts are added to the client's options (tests, TLS, SASL).
	Opts []kgo.Opt
}

// Apply applies one record's effect; tx is the transaction that records
// the key (nil for the in-memory deduper).
type Apply func(ctx context.Context, tx pgx.Tx, r *kgo.Record) error

// Consume reads the topic as a member of the group until ctx ends: each
// record's effect is applied unless its Idempotency-Key was applied
// before; offsets are committed once the records before them are applied
// (at-least-once delivery; the deduper makes the effect once).
func Consume(ctx context.Context, c Config, d Deduper, apply Apply, log *slog.Logger) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(c.Brokers...),
		kgo.ConsumerGroup(c.Group),
		kgo.ConsumeTopics(c.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
	}, c.Opts...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		var ferr error
		fs.EachError(func(topic string, p int32, err error) {
			ferr = errors.Join(ferr, fmt.Errorf("fetch %s/%d: %w", topic, p, err))
		})
		if ferr != nil {
			return ferr
		}
		var handled []*kgo.Record
		for _, r := range fs.Records() {
			if err := Handle(ctx, d, apply, r, log); err != nil {
				// Commit what was applied; the record is read again.
				_ = cl.CommitRecords(ctx, handled...)
				return err
			}
			handled = append(handled, r)
		}
		if err := cl.CommitRecords(ctx, handled...); err != nil {
			return fmt.Errorf("commit offsets: %w", err)
		}
	}
}

// Handle applies one record once. A record without the header (not
// written by drainer) is applied without deduplication, with a warning.
func Handle(ctx context.Context, d Deduper, apply Apply, r *kgo.Record, log *slog.Logger) error {
	key := header(r, headerIdempotencyKey)
	if key == "" {
		log.Warn("record without an Idempotency-Key header: applied without deduplication", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset)
		return apply(ctx, nil, r)
	}
	applied, err := d.Once(ctx, key, func(ctx context.Context, tx pgx.Tx) error { return apply(ctx, tx, r) })
	if err != nil {
		return fmt.Errorf("record %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
	}
	if !applied {
		log.Info("duplicate record skipped", "key", key, "topic", r.Topic, "partition", r.Partition, "offset", r.Offset)
	}
	return nil
}

// Deduper applies an effect once per key.
type Deduper interface {
	// Once runs apply unless key was applied before, and records key as
	// applied together with apply's effect; it reports whether apply ran.
	Once(ctx context.Context, key string, apply func(ctx context.Context, tx pgx.Tx) error) (bool, error)
}

// MemoryDeduper keeps the applied keys in memory: for demos and tests
// only, since a restarted consumer forgets them.
type MemoryDeduper struct {
	mu      sync.Mutex
	applied map[string]bool
}

// NewMemoryDeduper returns an empty MemoryDeduper.
func NewMemoryDeduper() *MemoryDeduper { return &MemoryDeduper{applied: map[string]bool{}} }

// Once implements Deduper.
func (m *MemoryDeduper) Once(ctx context.Context, key string, apply func(context.Context, pgx.Tx) error) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.applied[key] {
		return false, nil
	}
	if err := apply(ctx, nil); err != nil {
		return false, err
	}
	m.applied[key] = true
	return true, nil
}

// PostgresDeduper records the applied keys in kafka_consumer.applied_keys,
// in the transaction that applies the effect: the effect and its key
// commit together or not at all.
type PostgresDeduper struct{ pool *pgxpool.Pool }

// NewPostgresDeduper creates the table if needed.
func NewPostgresDeduper(ctx context.Context, pool *pgxpool.Pool) (*PostgresDeduper, error) {
	_, err := pool.Exec(ctx, `
CREATE SCHEMA IF NOT EXISTS kafka_consumer;
CREATE TABLE IF NOT EXISTS kafka_consumer.applied_keys (
	idempotency_key text PRIMARY KEY,
	applied_at      timestamptz NOT NULL DEFAULT now()
)`)
	if err != nil {
		return nil, fmt.Errorf("create kafka_consumer.applied_keys: %w", err)
	}
	return &PostgresDeduper{pool: pool}, nil
}

// Once implements Deduper.
func (p *PostgresDeduper) Once(ctx context.Context, key string, apply func(context.Context, pgx.Tx) error) (applied bool, err error) {
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO kafka_consumer.applied_keys (idempotency_key) VALUES ($1) ON CONFLICT DO NOTHING`, key)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return nil // applied before: nothing to do
		}
		applied = true
		return apply(ctx, tx)
	})
	if err != nil {
		return false, err
	}
	return applied, nil
}

func header(r *kgo.Record, name string) string {
	for _, h := range r.Headers {
		if h.Key == name {
			return string(h.Value)
		}
	}
	return ""
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
