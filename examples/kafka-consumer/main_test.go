package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/kafka"
	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/tooling/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

const topic = "agent.order_created"

// writeWithCopy writes two rows through drainer's kafka adapter, the first
// one twice from two producer sessions (as a restarted drainer does after a
// lost acknowledgement), and returns the two keys.
func writeWithCopy(t *testing.T, c *kfake.Cluster) []string {
	t.Helper()
	var keys []string
	var msgs []*dispatch.Message
	for i, scope := range []string{"order-1", "order-2"} {
		tu := idemkey.Tuple{AgentRunID: "run-1", StepID: "step-" + string(rune('a'+i)), ToolName: "order_created", BusinessScope: scope}
		msgs = append(msgs, &dispatch.Message{Key: tu.Key(), Tuple: tu, Kind: outbox.KindForward, Payload: json.RawMessage(`{"order_id":"` + scope + `"}`), Attempt: 1})
		keys = append(keys, tu.Key())
	}
	for _, m := range []*dispatch.Message{msgs[0], msgs[1], msgs[0]} {
		a, err := kafka.New(kafka.Config{Brokers: c.ListenAddrs(), Topic: topic}) // a new session each time
		if err != nil {
			t.Fatal(err)
		}
		if r := a.Dispatch(t.Context(), m); r.Outcome != dispatch.Success {
			t.Fatalf("write: %s (%v)", r.Outcome, r.Err)
		}
		_ = a.Close(context.Background())
	}
	return keys
}

// countingDeduper counts the records handed to a Deduper.
type countingDeduper struct {
	Deduper
	mu   sync.Mutex
	seen int
	done chan struct{}
	want int
}

func (c *countingDeduper) Once(ctx context.Context, key string, apply func(context.Context, pgx.Tx) error) (bool, error) {
	ok, err := c.Deduper.Once(ctx, key, apply)
	c.mu.Lock()
	if c.seen++; c.seen == c.want {
		close(c.done)
	}
	c.mu.Unlock()
	return ok, err
}

// consume runs Consume until d has seen n records and returns the keys
// applied, in order.
func consume(t *testing.T, c *kfake.Cluster, d Deduper, group string, n int) []string {
	t.Helper()
	cd := &countingDeduper{Deduper: d, done: make(chan struct{}), want: n}
	var mu sync.Mutex
	var applied []string
	apply := func(_ context.Context, tx pgx.Tx, r *kgo.Record) error {
		if tx != nil { // the effect commits with the key
			if _, err := tx.Exec(context.Background(), "CREATE TABLE IF NOT EXISTS orders_seen (aggregate text)"); err != nil {
				return err
			}
			if _, err := tx.Exec(context.Background(), "INSERT INTO orders_seen VALUES ($1)", string(r.Key)); err != nil {
				return err
			}
		}
		mu.Lock()
		applied = append(applied, header(r, headerIdempotencyKey))
		mu.Unlock()
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- Consume(ctx, Config{Brokers: c.ListenAddrs(), Topic: topic, Group: group}, cd, apply, slog.New(slog.DiscardHandler))
	}()
	select {
	case <-cd.done:
	case err := <-errc:
		t.Fatalf("consume ended early: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("the consumer did not see the records within 2 minutes")
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("consume: %v", err)
	}
	return applied
}

// TestConsumerDeduplicates: three records, two of them copies of one row,
// apply two effects, once each, with either deduper.
func TestConsumerDeduplicates(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	keys := writeWithCopy(t, c)

	t.Run("memory", func(t *testing.T) {
		got := consume(t, c, NewMemoryDeduper(), "memory", 3)
		if len(got) != 2 || got[0] != keys[0] || got[1] != keys[1] {
			t.Errorf("applied %v, want %v", got, keys)
		}
	})
	t.Run("postgres", func(t *testing.T) {
		pool, err := pgxpool.New(t.Context(), dbtest.NewDatabase(t))
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		d, err := NewPostgresDeduper(t.Context(), pool)
		if err != nil {
			t.Fatal(err)
		}
		got := consume(t, c, d, "postgres", 3)
		if len(got) != 2 {
			t.Errorf("applied %v, want %v", got, keys)
		}
		var stored, effects int
		if err := pool.QueryRow(t.Context(), "SELECT (SELECT count(*) FROM kafka_consumer.applied_keys), (SELECT count(*) FROM orders_seen)").Scan(&stored, &effects); err != nil {
			t.Fatal(err)
		}
		if stored != 2 || effects != 2 {
			t.Errorf("%d keys and %d effects stored, want 2 and 2", stored, effects)
		}
		// A consumer that reads the topic again (new group: from the
		// start) applies nothing: the keys are remembered in the table.
		again := consume(t, c, d, "postgres-again", 3)
		if len(again) != 0 {
			t.Errorf("read again, applied %v, want nothing", again)
		}
	})
}
