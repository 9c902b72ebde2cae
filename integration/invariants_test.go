//go:build integration

package integration

import (
	"context"
	"testing"
	"time"

	"github.com/drainer-io/drainer/tooling/mockprovider"
)

// chaosVerdict is what chaosCheck found after a scenario.
type chaosVerdict struct {
	scenario             string
	rows                 int
	duplicates           int // keys with more than one effect, plus tuples sent under two keys
	lost                 int // succeeded rows without an effect, or rows gone from the table
	stuck                int // rows pending or in_flight after the settle
	retryAfterViolations int
	rowsPerSec           float64
}

// chaosCheck checks the exactly-once invariants against the database and the
// provider once a scenario settled, fails the test on any violation, and
// returns the counts for the report.
func chaosCheck(t *testing.T, scenario string, s *chaosSetup, elapsed time.Duration) chaosVerdict {
	t.Helper()
	ctx := context.Background()
	v := chaosVerdict{scenario: scenario, rows: len(s.keys), rowsPerSec: float64(len(s.keys)) / elapsed.Seconds()}

	status := map[string]string{}
	rows, err := s.pool.Query(ctx, `SELECT key, status FROM drainer.outbox`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k, st string
		if err := rows.Scan(&k, &st); err != nil {
			t.Fatal(err)
		}
		status[k] = st
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}

	for _, k := range s.keys {
		st, ok := status[k]
		effects := s.provider.Effects(k)
		switch {
		case !ok:
			v.lost++
			t.Errorf("%s: row %s is gone from the outbox", scenario, k)
		case st == "pending" || st == "in_flight":
			v.stuck++
			if v.stuck <= 10 {
				t.Errorf("%s: row %s still %s after the settle", scenario, k, st)
			}
		case st == "succeeded" && effects == 0:
			v.lost++
			t.Errorf("%s: row %s succeeded without an effect at the provider", scenario, k)
		case (st == "failed" || st == "cancelled") && effects > 0:
			v.duplicates++
			t.Errorf("%s: row %s is %s but the provider applied %d effects", scenario, k, st, effects)
		}
		if effects > 1 {
			v.duplicates++
			t.Errorf("%s: row %s (%s) has %d effects at the provider", scenario, k, st, effects)
		}
	}
	if m := s.provider.MultiKeyTuples(); len(m) > 0 {
		v.duplicates += len(m)
		t.Errorf("%s: %d tuples sent under more than one key: %v", scenario, len(m), m[:min(len(m), 5)])
	}
	var ra, undelivered, unreceived []string
	ours := make(map[string]bool, len(s.keys))
	for _, k := range s.keys {
		ours[k] = true
	}
	for _, x := range s.provider.RetryAfterViolationDetails() {
		switch {
		case !ours[x.Key]: // another database's row (one provider serves a fleet)
		case s.answerMayBeLost(x.GivenAt):
			undelivered = append(undelivered, x.Key)
		case !retryAfterReceived(t, s, x):
			unreceived = append(unreceived, x.Key)
		default:
			ra = append(ra, x.Key)
		}
	}
	if len(undelivered) > 0 {
		// The fault between daemon and provider may have eaten the answer
		// that carried the Retry-After: the daemon cannot honour what it
		// never received. Reported, not counted.
		t.Logf("%s: %d early requests after a Retry-After answered while the provider path was faulty (answer possibly lost): %v",
			scenario, len(undelivered), undelivered[:min(len(undelivered), 5)])
	}
	if len(unreceived) > 0 {
		// The provider wrote the 429, but no replica recorded it: the
		// attempt ended otherwise (its timeout fired before the answer was
		// read, its lease was lost, its replica died). Reported, not counted.
		t.Logf("%s: %d early requests after a Retry-After no replica recorded receiving: %v",
			scenario, len(unreceived), unreceived[:min(len(unreceived), 5)])
	}
	if len(ra) > 0 {
		v.retryAfterViolations = len(ra)
		t.Errorf("%s: %d requests arrived before their Retry-After expired: %v", scenario, len(ra), ra[:min(len(ra), 5)])
	}
	if snap := s.provider.Snapshot(); snap.BadRequests != 0 {
		t.Errorf("%s: provider answered %d bad requests", scenario, snap.BadRequests)
	}
	// audit verify reads every entry: bound it by the table's size (about
	// 3.4 entries per row; a busy machine verifies ~30k entries/s).
	verifyBound := time.Minute + time.Duration(len(s.keys))*time.Millisecond
	if res := runCLIWithin(t, verifyBound, nil, "audit", "verify", "--database-url", s.dbURL); res.code != 0 {
		t.Errorf("%s: drainer audit verify: %s", scenario, res)
	}
	t.Logf("%s: rows %d, duplicates %d, lost %d, stuck %d, Retry-After violations %d, %.0f rows/s; statuses %v",
		scenario, v.rows, v.duplicates, v.lost, v.stuck, v.retryAfterViolations, v.rowsPerSec, statusCounts(t, s.pool))
	return v
}

// retryAfterReceived reports whether a replica recorded the provider's 429
// of x before the early request: an attempt of x.Key written to the audit
// trail with that answer between the answer and the early request (the
// audit's time is the completion's, on this machine's clock).
func retryAfterReceived(t *testing.T, s *chaosSetup, x mockprovider.RetryAfterViolation) bool {
	t.Helper()
	var received bool
	err := s.pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM drainer.audit
		WHERE key = $1 AND response_status = 429 AND at >= $2::timestamptz - interval '1 second' AND at <= $3)`,
		x.Key, x.GivenAt, x.At).Scan(&received)
	if err != nil {
		t.Fatal(err)
	}
	return received
}
