package kafka

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/outbox"
)

// Topics the test clusters are seeded with.
const (
	topicOrders = "orders"
	topicTiny   = "tiny" // max.message.bytes 1024
)

// newCluster starts an in-process broker (the real wire protocol on a
// loopback port) seeded with topicOrders; it is closed with t.Cleanup.
func newCluster(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	opts = append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(1, topicOrders)}, opts...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// newAdapter builds an adapter for cfg (brokers default to c's); it is
// closed with t.Cleanup.
func newAdapter(t testing.TB, c *kfake.Cluster, cfg Config) *Adapter {
	t.Helper()
	if cfg.Brokers == nil {
		cfg.Brokers = c.ListenAddrs()
	}
	if cfg.Topic == "" {
		cfg.Topic = topicOrders
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	return a
}

var msgSeq atomic.Int64

// newMessage returns a first attempt of a new row of tool with scope.
func newMessage(tool, scope, payload string) *dispatch.Message {
	n := msgSeq.Add(1)
	tu := idemkey.Tuple{AgentRunID: "run-kafka-test", StepID: "step-" + strconv.FormatInt(n, 10), ToolName: tool, BusinessScope: scope}
	return &dispatch.Message{Key: tu.Key(), Tuple: tu, Kind: outbox.KindForward, Payload: json.RawMessage(payload), Attempt: 1, Seq: n}
}

func dispatchOnce(t testing.TB, a *Adapter, m *dispatch.Message) dispatch.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return a.Dispatch(ctx, m)
}

func wantOutcome(t testing.TB, what string, r dispatch.Result, want dispatch.Outcome, reason string) {
	t.Helper()
	if r.Outcome != want || reason != "" && r.Reason != reason {
		t.Fatalf("%s: got %s (reason %q, err %v), want %s (reason %q)", what, r.Outcome, r.Reason, r.Err, want, reason)
	}
	if (r.Err == nil) != r.Succeeded() {
		t.Fatalf("%s: %s with err %v", what, r.Outcome, r.Err)
	}
}

// readAll reads every record of topic from its start to its current end.
// It gives up only when a read brings nothing for readStall: a loaded
// machine reads slowly, and a verdict must not depend on its speed.
func readAll(t testing.TB, brokers []string, topic string, opts ...kgo.Opt) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readStall)
	defer cancel()
	admCl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	ends, err := kadm.NewClient(admCl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("list end offsets of %s: %v", topic, err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("end offset of %s/%d: %v", topic, o.Partition, o.Err)
		}
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	var recs []*kgo.Record
	if len(want) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for len(want) > 0 {
		pollCtx, cancelPoll := context.WithTimeout(context.Background(), readStall)
		fs := cl.PollFetches(pollCtx)
		stalled := pollCtx.Err() != nil
		cancelPoll()
		if stalled {
			t.Fatalf("reading %s: nothing read for %s, %d partitions not read to their end: %v", topic, readStall, len(want), want)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := want[r.Partition]; ok && r.Offset < end {
				recs = append(recs, r)
				if r.Offset == end-1 {
					delete(want, r.Partition)
				}
			}
		})
	}
	return recs
}

// readStall is how long readAll waits for a read that brings nothing.
const readStall = 2 * time.Minute

// header returns the value of a record's header.
func header(r *kgo.Record, name string) string {
	for _, h := range r.Headers {
		if h.Key == name {
			return string(h.Value)
		}
	}
	return ""
}

// copiesByKey counts the records of each Idempotency-Key.
func copiesByKey(recs []*kgo.Record) map[string]int {
	n := map[string]int{}
	for _, r := range recs {
		n[header(r, HeaderIdempotencyKey)]++
	}
	return n
}

func payloadN(i int) string { return fmt.Sprintf(`{"order_id":"o-%d","amount":%d}`, i, i) }

// kfakeSeed seeds more single-partition topics.
func kfakeSeed(topics ...string) kfake.Opt { return kfake.SeedTopics(1, topics...) }

// saslOpt authenticates a test client as s does.
func saslOpt(s SASL) kgo.Opt { return kgo.SASL(mechanism(s)) }

// attemptN returns a copy of m as its n-th attempt.
func attemptN(m *dispatch.Message, n int) *dispatch.Message {
	c := *m
	c.Attempt = n
	return &c
}
