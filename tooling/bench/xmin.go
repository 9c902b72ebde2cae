package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// xminBacklogFactor sizes the xmin phases' backlog: the drain rate times the
// phase's duration, with room to spare, so the drain never runs dry.
const xminBacklogFactor = 1.15

// xmin measures xmin_ratio: the drain rate over XminDuration while another
// session holds a snapshot open the whole time (so vacuum can remove no row
// version the drain leaves behind) ÷ the same without it.
func (r *runner) xmin(ctx context.Context, res *Result) error {
	d := r.sizes.XminDuration
	n := int(res.DrainRowsPerS*d.Seconds()*xminBacklogFactor) + 1000
	base, err := r.timedDrain(ctx, n, d, false)
	if err != nil {
		return err
	}
	held, err := r.timedDrain(ctx, n, d, true)
	if err != nil {
		return err
	}
	res.XminBaselineRowsPerS, res.XminRowsPerS, res.XminDurationS = round(base, 1), round(held, 1), d.Seconds()
	return nil
}

// timedDrain fills n rows and returns the dispatch rate of the engines over
// d, with a snapshot held open by another session for all of it if hold.
func (r *runner) timedDrain(ctx context.Context, n int, d time.Duration, hold bool) (rate float64, err error) {
	what := "without a held snapshot"
	if hold {
		what = "while another session holds a snapshot"
	}
	r.logf("xmin: filling %d rows, then draining for %s %s", n, d, what)
	if err := r.fill(ctx, n); err != nil {
		return 0, err
	}
	if hold {
		conn, err := r.admin.Acquire(ctx)
		if err != nil {
			return 0, fmt.Errorf("xmin: %w", err)
		}
		defer conn.Release()
		tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			return 0, fmt.Errorf("xmin: hold a snapshot: %w", err)
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		// The first statement takes the snapshot; the server shows it as
		// this backend's xmin, which holds back every vacuum.
		var held bool
		if err := tx.QueryRow(ctx, "SELECT backend_xmin IS NOT NULL FROM pg_stat_activity WHERE pid = pg_backend_pid()").Scan(&held); err != nil {
			return 0, fmt.Errorf("xmin: hold a snapshot: %w", err)
		}
		if !held {
			return 0, fmt.Errorf("xmin: the snapshot-holding session shows no xmin")
		}
	}
	p := newProbe(n, false)
	begin := time.Now()
	es, err := r.startEngines(ctx, p.adapter())
	if err != nil {
		return 0, err
	}
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-p.reached:
	case <-ctx.Done():
		err = ctx.Err()
	}
	t.Stop()
	calls, elapsed := p.calls.Load(), time.Since(begin)
	if serr := es.stop(); err == nil {
		err = serr
	}
	if err != nil {
		return 0, err
	}
	if calls >= int64(n) {
		// The backlog ran dry before the time was up: the rate is over the
		// time it took, and the phase was shorter than asked.
		elapsed = time.Duration(p.lastNs.Load() - begin.UnixNano())
		r.logf("xmin: the backlog of %d rows ran dry after %s; rate over that time", n, elapsed.Round(time.Millisecond))
	}
	rate = float64(calls) / elapsed.Seconds()
	r.logf("xmin: %d rows dispatched in %s = %.0f rows/s %s", calls, elapsed.Round(time.Millisecond), rate, what)
	return rate, nil
}
