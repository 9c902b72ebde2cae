//go:build integration

package integration

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKafkaRun: `drainer run` with a kafka adapter whose broker is not up
// yet starts, reports the adapter not ready and holds its rows; once the
// broker listens the rows drain, each one record on its topic with the key
// and headers of docs/reference.md §5; SIGTERM exits 0.
func TestKafkaRun(t *testing.T) {
	t.Parallel()
	const n = 200
	dbURL, pool := newMigratedDB(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	cfg := fmt.Sprintf(`
adapters:
  orders_log: {type: kafka, brokers: [%q], topic: "agent.{tool_name}", timeout: 2s}
routes:
  order_created: {adapter: orders_log}
`, addr)
	d := startDaemon(t, "kafka", "--config", writeFile(t, t.TempDir(), "drainer.yaml", cfg), "--database-url", dbURL)
	testkit.WaitFor(t, 30*time.Second, "the kafka adapter reported not ready", func() (bool, string) {
		d.requireRunning()
		code, body := d.get("/metrics")
		return code == 200 && notReady.MatchString(body), fmt.Sprint(code)
	})
	for i := range n {
		if _, err := pool.Exec(t.Context(), "SELECT drainer.enqueue('run-k', $1, 'order_created', $2, '{\"n\":1}')",
			"step-"+strconv.Itoa(i), "order-"+strconv.Itoa(i%7)); err != nil {
			t.Fatal(err)
		}
	}
	// Every row is tried and held: given back pending with the adapter's
	// answer, none sent or failed without a broker.
	testkit.WaitFor(t, 2*time.Minute, "every row tried and held while no broker listens", func() (bool, string) {
		d.requireRunning()
		var held int
		if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM drainer.outbox WHERE status = 'pending' AND last_error IS NOT NULL").Scan(&held); err != nil {
			t.Fatal(err)
		}
		c := statusCounts(t, pool)
		if c["succeeded"]+c["failed"] != 0 {
			t.Fatalf("rows finished without a broker: %v", c)
		}
		return held == n, fmt.Sprintf("%d held; %v", held, c)
	})

	_, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(p), kfake.SeedTopics(3, "agent.order_created"))
	if err != nil {
		t.Fatalf("start the broker on %s: %v", addr, err)
	}
	defer c.Close()
	testkit.WaitFor(t, 60*time.Second, "every row succeeded", func() (bool, string) {
		d.requireRunning()
		counts := statusCounts(t, pool)
		return counts["succeeded"] == n, fmt.Sprint(counts)
	})
	if got := d.metric("drainer_adapter_ready", `adapter="orders_log"`); got != 1 {
		t.Errorf("drainer_adapter_ready %v once the broker answered, want 1", got)
	}

	recs := readTopic(t, c.ListenAddrs(), "agent.order_created")
	keys := map[string]int{}
	for _, r := range recs {
		var idem string
		for _, h := range r.Headers {
			if h.Key == "Idempotency-Key" {
				idem = h.Value
			}
		}
		keys[idem]++
		var scope string
		if err := pool.QueryRow(t.Context(), "SELECT business_scope FROM drainer.outbox WHERE key = $1", idem).Scan(&scope); err != nil {
			t.Fatalf("record with Idempotency-Key %q: no such row: %v", idem, err)
		}
		if string(r.Key) != scope {
			t.Errorf("record key %q, want the row's business scope %q", r.Key, scope)
		}
	}
	if len(keys) != n {
		t.Errorf("%d distinct keys on the topic (%d records), want %d", len(keys), len(recs), n)
	}
	d.signal(syscall.SIGTERM)
	if code := d.exitCode(20 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
}

// notReady matches the sample that says the kafka adapter is not ready.
var notReady = regexp.MustCompile(`(?m)^drainer_adapter_ready\{[^}]*adapter="orders_log"[^}]*\} 0$`)

type topicRecord struct {
	Key     []byte
	Headers []struct{ Key, Value string }
}

// readTopic reads every record of topic, start to current end.
func readTopic(t *testing.T, brokers []string, topic string) []topicRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	var out []topicRecord
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: partitions not read to their end: %v", topic, left)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := left[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			tr := topicRecord{Key: r.Key}
			for _, h := range r.Headers {
				tr.Headers = append(tr.Headers, struct{ Key, Value string }{h.Key, string(h.Value)})
			}
			out = append(out, tr)
			if r.Offset == end-1 {
				delete(left, r.Partition)
			}
		})
	}
	return out
}
