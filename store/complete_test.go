package store_test

import (
	"testing"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/jackc/pgx/v5/pgtype"
)

// TestFencingRejectsLateCompletion: a worker whose lease expired and was
// reclaimed cannot overwrite the new owner's result.
func TestFencingRejectsLateCompletion(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := t.Context()
	lateMsg := "late"
	keys := storetest.Enqueue(t, pool, "run-7", "t", 1)
	first, err := st.Claim(ctx, pool, store.Claim{Limit: 1, Lease: 10 * time.Millisecond, Replica: "a", Durable: true})
	if err != nil || len(first) != 1 {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if n, err := st.Reclaim(ctx, pool, store.ReclaimPolicy{}); err != nil || n != 1 {
		t.Fatalf("reclaim: %d %v", n, err)
	}
	second, err := st.Claim(ctx, pool, store.Claim{Limit: 1, Lease: time.Minute, Replica: "b", Durable: true})
	if err != nil || len(second) != 1 {
		t.Fatal(err)
	}
	late := store.Completion{Seq: first[0].Seq, Token: first[0].LeaseToken, Status: outbox.StatusFailed, LastError: &lateMsg, KeepNext: true}
	done, err := st.Complete(ctx, pool, []store.Completion{late})
	if err != nil || len(done.Lost) != 1 || done.Lost[0] != first[0].Seq {
		t.Fatalf("late completion: lost %v err %v; want it rejected", done.Lost, err)
	}
	if r := storetest.Get(t, pool, keys[0]); r.Status != outbox.StatusInFlight || r.Attempts != 2 {
		t.Fatalf("row after late completion: %+v", r)
	}
	owner := store.Completion{Seq: second[0].Seq, Token: second[0].LeaseToken, Status: outbox.StatusSucceeded, Response: []byte(`{}`), KeepNext: true}
	if done, err := st.Complete(ctx, pool, []store.Completion{owner}); err != nil || len(done.Lost) != 0 {
		t.Fatalf("owner completion: lost %v err %v", done.Lost, err)
	}
	if r := storetest.Get(t, pool, keys[0]); r.Status != outbox.StatusSucceeded {
		t.Fatalf("row: %+v", r)
	}
}

// TestStillLeased: of the rows a replica could not complete, only those
// still in_flight under its lease count; a row another replica reclaimed
// and settled since does not.
func TestStillLeased(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := t.Context()
	storetest.Enqueue(t, pool, "run-8", "t", 3)
	mine, err := st.Claim(ctx, pool, store.Claim{Limit: 3, Lease: 10 * time.Millisecond, Replica: "a", Durable: true})
	if err != nil || len(mine) != 3 {
		t.Fatalf("claim: %d rows, %v", len(mine), err)
	}
	seqs := []int64{mine[0].Seq, mine[1].Seq, mine[2].Seq}
	tokens := []pgtype.UUID{mine[0].LeaseToken, mine[1].LeaseToken, mine[2].LeaseToken}
	if n, err := st.StillLeased(ctx, pool, seqs, tokens); err != nil || n != 3 {
		t.Fatalf("StillLeased right after the claim = %d, %v; want 3", n, err)
	}
	time.Sleep(50 * time.Millisecond)
	if n, err := st.Reclaim(ctx, pool, store.ReclaimPolicy{}); err != nil || n != 3 {
		t.Fatalf("reclaim: %d %v", n, err)
	}
	// Another replica takes the rows back and settles one of them.
	theirs, err := st.Claim(ctx, pool, store.Claim{Limit: 3, Lease: time.Minute, Replica: "b", Durable: true})
	if err != nil || len(theirs) != 3 {
		t.Fatalf("second claim: %d rows, %v", len(theirs), err)
	}
	done := store.Completion{Seq: theirs[0].Seq, Token: theirs[0].LeaseToken, Status: outbox.StatusSucceeded, Response: []byte(`{}`), KeepNext: true}
	if _, err := st.Complete(ctx, pool, []store.Completion{done}); err != nil {
		t.Fatal(err)
	}
	if n, err := st.StillLeased(ctx, pool, seqs, tokens); err != nil || n != 0 {
		t.Fatalf("StillLeased of the first lease after another replica took the rows = %d, %v; want 0", n, err)
	}
	theirSeqs := []int64{theirs[0].Seq, theirs[1].Seq, theirs[2].Seq}
	theirTokens := []pgtype.UUID{theirs[0].LeaseToken, theirs[1].LeaseToken, theirs[2].LeaseToken}
	if n, err := st.StillLeased(ctx, pool, theirSeqs, theirTokens); err != nil || n != 2 {
		t.Fatalf("StillLeased of the second lease = %d, %v; want 2 (one settled)", n, err)
	}
}

// TestReclaimHoldsAndLateCompletionLands: a reclaimed row is not due before
// its lease expiry plus its tool's hold (a Retry-After its lost worker may
// have been given), and the completion that worker writes late, the row not
// having been claimed since, lands: its floor replaces the hold. Written
// once; a completion of a row claimed again since never lands.
func TestReclaimHoldsAndLateCompletionLands(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := t.Context()
	keys := storetest.Enqueue(t, pool, "run-late", "t", 2)
	mine, err := st.Claim(ctx, pool, store.Claim{Limit: 2, Lease: 10 * time.Millisecond, Replica: "a", Durable: true})
	if err != nil || len(mine) != 2 {
		t.Fatalf("claim: %d rows, %v", len(mine), err)
	}
	time.Sleep(50 * time.Millisecond)
	policy := store.ReclaimPolicy{Hold: map[string]time.Duration{"t": time.Hour}}
	if n, err := st.Reclaim(ctx, pool, policy); err != nil || n != 2 {
		t.Fatalf("reclaim: %d %v", n, err)
	}
	for _, k := range keys {
		r := storetest.Get(t, pool, k)
		if r.Status != outbox.StatusPending || r.DueIn < 59*time.Minute || r.Floor < 59*time.Minute {
			t.Fatalf("reclaimed row %s: status %s, due in %s, floor in %s; want pending, held about an hour", k, r.Status, r.DueIn, r.Floor)
		}
	}
	if n, err := st.Claim(ctx, pool, store.Claim{Limit: 2, Lease: time.Minute, Replica: "b", Durable: true}); err != nil || len(n) != 0 {
		t.Fatalf("a held row was claimed again: %d rows, %v", len(n), err)
	}

	// The worker of the first row got 503 Retry-After 30 s; of the second,
	// a success. Both are written late, over the reclaim.
	msg := "attempt 1 of 5: http 503"
	late := []store.Completion{
		{Seq: mine[0].Seq, Token: mine[0].LeaseToken, Attempts: mine[0].Attempts, Status: outbox.StatusPending,
			Delay: 30 * time.Second, Floor: true, LastError: &msg, ResponseStatus: 503},
		{Seq: mine[1].Seq, Token: mine[1].LeaseToken, Attempts: mine[1].Attempts, Status: outbox.StatusSucceeded,
			KeepNext: true, Response: []byte(`{"ok":true}`), ResponseStatus: 200},
	}
	done, err := st.Complete(ctx, pool, late)
	if err != nil || len(done.Lost) != 0 {
		t.Fatalf("late completions: lost %v, err %v; want both written", done.Lost, err)
	}
	r := storetest.Get(t, pool, mine[0].Key)
	if r.Status != outbox.StatusPending || r.Floor < 25*time.Second || r.Floor > 35*time.Second || r.DueIn < 25*time.Second || r.DueIn > 35*time.Second {
		t.Fatalf("row answered 503 Retry-After 30 s: status %s, due in %s, floor in %s; want the provider's 30 s", r.Status, r.DueIn, r.Floor)
	}
	if r := storetest.Get(t, pool, mine[1].Key); r.Status != outbox.StatusSucceeded || r.Attempts != 1 {
		t.Fatalf("row answered 200: %+v; want succeeded after 1 attempt", r)
	}
	if done, err := st.Complete(ctx, pool, late[:1]); err != nil || len(done.Lost) != 1 {
		t.Fatalf("the same late completion again: lost %v, err %v; want it fenced off (written once)", done.Lost, err)
	}

	// Claimed again and answered since: the old worker's answer is stale.
	if _, err := pool.Exec(ctx, `UPDATE `+storetest.Schema+`.outbox SET not_before = NULL, next_attempt_at = now() WHERE seq = $1`, mine[0].Seq); err != nil {
		t.Fatal(err)
	}
	again, err := st.Claim(ctx, pool, store.Claim{Limit: 1, Lease: 10 * time.Millisecond, Replica: "b", Durable: true})
	if err != nil || len(again) != 1 {
		t.Fatalf("claim again: %d rows, %v", len(again), err)
	}
	time.Sleep(50 * time.Millisecond)
	if n, err := st.Reclaim(ctx, pool, store.ReclaimPolicy{}); err != nil || n != 1 {
		t.Fatalf("second reclaim: %d %v", n, err)
	}
	if done, err := st.Complete(ctx, pool, late[:1]); err != nil || len(done.Lost) != 1 {
		t.Fatalf("the first lease's completion after a second claim: lost %v, err %v; want it fenced off", done.Lost, err)
	}
	if r := storetest.Get(t, pool, mine[0].Key); r.Attempts != 2 || r.DueIn > time.Second {
		t.Fatalf("row after the stale completion: %+v; want attempts 2, due at once (no hold)", r)
	}
}

// TestCompletionFindsARowMovedSinceItsClaim: a completion looks for its row
// in the generation it was claimed from; a row the rotation moved since
// (reclaimed and held, its answer late) is still found and written, once,
// and a replica of an older release, which passes no generation, still
// completes its rows.
func TestCompletionFindsARowMovedSinceItsClaim(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := t.Context()
	storetest.Enqueue(t, pool, "run-moved", "t", 3)
	mine, err := st.Claim(ctx, pool, store.Claim{Limit: 3, Lease: 10 * time.Millisecond, Replica: "a", Durable: true})
	if err != nil || len(mine) != 3 {
		t.Fatalf("claim: %d rows, %v", len(mine), err)
	}
	var current int16
	if err := pool.QueryRow(ctx, `SELECT gen FROM `+storetest.Schema+`.queue_generations WHERE current`).Scan(&current); err != nil {
		t.Fatal(err)
	}
	for _, r := range mine {
		if r.Gen != current {
			t.Fatalf("claimed row %d: generation %d, want the current one, %d", r.Seq, r.Gen, current)
		}
	}
	// A settled row lets the rotation close the generation.
	if done, err := st.Complete(ctx, pool, []store.Completion{{Seq: mine[2].Seq, Token: mine[2].LeaseToken, Attempts: mine[2].Attempts,
		Gen: mine[2].Gen, Status: outbox.StatusSucceeded, KeepNext: true, Response: []byte(`{}`), ResponseStatus: 200}}); err != nil || len(done.Lost) != 0 {
		t.Fatalf("complete the third row: lost %v, %v", done.Lost, err)
	}
	mine = mine[:2]
	time.Sleep(50 * time.Millisecond)
	if n, err := st.Reclaim(ctx, pool, store.ReclaimPolicy{Hold: map[string]time.Duration{"t": time.Hour}}); err != nil || n != 2 {
		t.Fatalf("reclaim: %d %v", n, err)
	}
	rotateUntilQuiet(t, st, pool, testRotation)
	for _, r := range mine {
		var gen int16
		if err := pool.QueryRow(ctx, `SELECT gen FROM `+storetest.Schema+`.queue WHERE seq = $1`, r.Seq).Scan(&gen); err != nil {
			t.Fatal(err)
		}
		if gen == r.Gen {
			t.Fatalf("row %d still in generation %d after the rotation: the test needs it moved", r.Seq, gen)
		}
	}

	msg := "attempt 1 of 5: http 503"
	late := []store.Completion{
		{Seq: mine[0].Seq, Token: mine[0].LeaseToken, Attempts: mine[0].Attempts, Gen: mine[0].Gen, Status: outbox.StatusPending,
			Delay: 30 * time.Second, Floor: true, LastError: &msg, ResponseStatus: 503},
		{Seq: mine[1].Seq, Token: mine[1].LeaseToken, Attempts: mine[1].Attempts, Gen: mine[1].Gen, Status: outbox.StatusSucceeded,
			KeepNext: true, Response: []byte(`{"ok":true}`), ResponseStatus: 200},
	}
	done, err := st.Complete(ctx, pool, late)
	if err != nil || len(done.Lost) != 0 {
		t.Fatalf("late completions of moved rows: lost %v, err %v; want both written", done.Lost, err)
	}
	if r := storetest.Get(t, pool, mine[0].Key); r.Status != outbox.StatusPending || r.DueIn < 25*time.Second || r.DueIn > 35*time.Second {
		t.Fatalf("moved row answered 503 Retry-After 30 s: status %s, due in %s; want pending, due in 30 s", r.Status, r.DueIn)
	}
	if r := storetest.Get(t, pool, mine[1].Key); r.Status != outbox.StatusSucceeded || r.Attempts != 1 {
		t.Fatalf("moved row answered 200: %+v; want succeeded after 1 attempt", r)
	}
	if done, err := st.Complete(ctx, pool, late); err != nil || len(done.Lost) != 2 {
		t.Fatalf("the same late completions again: lost %v, err %v; want both fenced off", done.Lost, err)
	}

	// An older replica's call: no generations.
	keys := storetest.Enqueue(t, pool, "run-old-replica", "t", 1)
	old, err := st.Claim(ctx, pool, store.Claim{Limit: 1, Lease: time.Minute, Replica: "old", Durable: true})
	if err != nil || len(old) != 1 {
		t.Fatalf("claim: %d rows, %v", len(old), err)
	}
	var written []int64
	rows, err := pool.Query(ctx, `SELECT seq FROM `+storetest.Schema+`.complete_rows(ARRAY[$1::bigint], ARRAY[$2::uuid], ARRAY['succeeded'],
	        ARRAY[0], ARRAY[-1::bigint], ARRAY[NULL::text], ARRAY[NULL::text], ARRAY['{}'], ARRAY[200], ARRAY[false], ARRAY[$3::int], true)`,
		old[0].Seq, old[0].LeaseToken, old[0].Attempts)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s int64
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		written = append(written, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(written) != 1 || written[0] != old[0].Seq {
		t.Fatalf("complete_rows without generations wrote %v; want [%d]", written, old[0].Seq)
	}
	if r := storetest.Get(t, pool, keys[0]); r.Status != outbox.StatusSucceeded {
		t.Fatalf("row completed without its generation: %+v", r)
	}
	assertAuditVerifies(t, pool)
}
