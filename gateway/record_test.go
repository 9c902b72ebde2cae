package gateway

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/store"
)

// TestRecorderBatchesTheCallsThatArriveMeanwhile: a call alone is written
// at once, by itself; the calls that arrive while a batch is written go
// together in the next one, in their order, each told its own answer; a
// batch of several that fails sends each of its calls to be recorded alone,
// while a call alone gets its batch's error. (The recorder's transaction
// itself is store.EnqueueLeasedBatch, tested against Postgres in store.)
func TestRecorderBatchesTheCallsThatArriveMeanwhile(t *testing.T) {
	var mu sync.Mutex
	var sizes []int
	fail := errors.New("refused")
	r := &recorder{write: func(ctx context.Context, reqs []store.LeaseRequest) ([]store.Leased, bool, error) {
		mu.Lock()
		sizes = append(sizes, len(reqs))
		mu.Unlock()
		out := make([]store.Leased, len(reqs))
		for i, q := range reqs {
			if q.In.StepID == "bad" {
				return nil, false, fail
			}
			out[i].Enqueued = store.Enqueued{Key: q.In.StepID, Created: true}
		}
		return out, false, nil
	}}
	req := func(step string) store.LeaseRequest {
		return store.LeaseRequest{In: store.Intent{StepID: step}}
	}

	if res := r.record(t.Context(), req("first")); res.err != nil || res.alone || res.leased.Enqueued.Key != "first" {
		t.Fatalf("a call alone: %+v; want its own answer", res)
	}

	// The first batch is held until the others wait behind it.
	release := make(chan struct{})
	held := make(chan struct{})
	var once sync.Once
	r.hold = func(int) {
		once.Do(func() {
			close(held)
			<-release
		})
	}
	const behind = 10
	results := make([]recordResult, behind+1)
	var wg sync.WaitGroup
	wg.Go(func() { results[0] = r.record(t.Context(), req("lead")) })
	<-held
	for i := 1; i <= behind; i++ {
		wg.Go(func() { results[i] = r.record(t.Context(), req(string(rune('a'+i)))) })
	}
	for {
		r.mu.Lock()
		n := len(r.queue)
		r.mu.Unlock()
		if n == behind {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	mu.Lock()
	got := append([]int(nil), sizes...)
	mu.Unlock()
	if len(got) != 3 || got[0] != 1 || got[1] != 1 || got[2] != behind {
		t.Fatalf("batches of %v; want 1 (alone), 1 (held), then the %d that waited together", got, behind)
	}
	for i := 1; i <= behind; i++ {
		if want := string(rune('a' + i)); results[i].err != nil || results[i].leased.Enqueued.Key != want {
			t.Errorf("call %s: %+v; want its own answer", want, results[i])
		}
	}

	// A failing batch of several: each of its calls is to be recorded alone.
	release, held, once = make(chan struct{}), make(chan struct{}), sync.Once{}
	wg.Go(func() { results[0] = r.record(t.Context(), req("lead")) })
	<-held
	wg.Go(func() { results[1] = r.record(t.Context(), req("ok")) })
	wg.Go(func() { results[2] = r.record(t.Context(), req("bad")) })
	for {
		r.mu.Lock()
		n := len(r.queue)
		r.mu.Unlock()
		if n == 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if !results[1].alone || !results[2].alone || results[1].err != nil || results[2].err != nil {
		t.Errorf("a failed batch of two: %+v and %+v; want both sent to be recorded alone", results[1], results[2])
	}
	if res := r.record(t.Context(), req("bad")); res.alone || !errors.Is(res.err, fail) {
		t.Errorf("a failed call alone: %+v; want its error", res)
	}
	for stop := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		r.mu.Lock()
		running := r.running
		r.mu.Unlock()
		if !running {
			break
		}
		if time.Now().After(stop) {
			t.Fatal("the recorder still runs a minute after the last call was answered")
		}
	}
}

// TestRecordBatchContext: a batch runs within the latest deadline of its
// calls, and ends once every one of their contexts ended, not before.
func TestRecordBatchContext(t *testing.T) {
	now := time.Now()
	short, cancelShort := context.WithDeadline(context.Background(), now.Add(time.Minute))
	defer cancelShort()
	long, cancelLong := context.WithDeadline(context.Background(), now.Add(time.Hour))
	defer cancelLong()
	ctx, done := batchContext([]*recordCall{{ctx: short}, {ctx: long}})
	defer done()
	if d, ok := ctx.Deadline(); !ok || !d.Equal(now.Add(time.Hour)) {
		t.Errorf("deadline %v (%v); want the latest, %v", d, ok, now.Add(time.Hour))
	}
	cancelShort()
	if ctx.Err() != nil {
		t.Fatal("the batch ended when one of its two calls did")
	}
	cancelLong()
	select {
	case <-ctx.Done():
	case <-time.After(time.Minute):
		t.Fatal("the batch did not end a minute after all its calls did")
	}
	unbounded, doneU := batchContext([]*recordCall{{ctx: long}, {ctx: context.Background()}})
	defer doneU()
	if _, ok := unbounded.Deadline(); ok {
		t.Error("a batch with a call without a deadline has one")
	}
}
