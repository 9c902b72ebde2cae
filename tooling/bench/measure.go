package bench

import (
	"cmp"
	"context"
	"errors"
	"slices"
)

// measure runs the phases in order.
func (r *runner) measure(ctx context.Context, res *Result) error {
	if err := r.warmup(ctx); err != nil {
		return err
	}
	phases := []struct {
		name string
		run  func(context.Context, *Result) error
	}{
		{"drain", r.drains},
		{"no-audit", r.drainsNoAudit},
		{"ceiling", r.ceilingPhase},
		{"river", r.riverPhase},
		{"backlog", r.backlogPhase},
		{"latency", r.latencyPhase},
		{"xmin", r.xmin},
		{"http", r.httpPhase},
		{"enqueue", r.enqueues},
		{"gateway", r.gatewayPhase},
		{"rss", r.rss},
	}
	for _, p := range phases {
		if len(r.opts.Phases) > 0 && !slices.Contains(r.opts.Phases, p.name) {
			continue
		}
		if err := p.run(ctx, res); err != nil {
			return err
		}
	}
	err := setRatios(res)
	if len(r.opts.Phases) > 0 {
		return nil // a partial run leaves the ratios of missing phases at 0
	}
	return err
}

// ceilingPhase measures the bare loops at every CeilingSetting; the best
// counts.
func (r *runner) ceilingPhase(ctx context.Context, res *Result) error {
	for _, c := range r.sizes.CeilingSettings {
		rate, err := r.ceiling(ctx, c.Loops, c.Batch)
		if err != nil {
			return err
		}
		run := CeilingRun{Loops: c.Loops, Batch: c.Batch, RowsPerS: round(rate, 1)}
		res.CeilingRuns = append(res.CeilingRuns, run)
		if run.RowsPerS > res.CeilingRowsPerS {
			res.CeilingRowsPerS, res.CeilingLoops, res.CeilingBatch = run.RowsPerS, run.Loops, run.Batch
		}
	}
	return nil
}

// riverPhase measures River at every RiverSetting; the best counts.
func (r *runner) riverPhase(ctx context.Context, res *Result) error {
	for _, s := range r.sizes.RiverSettings {
		s.Workers = cmp.Or(s.Workers, r.opts.Workers)
		rate, err := r.river(ctx, s)
		if err != nil {
			return err
		}
		run := RiverRun{Workers: s.Workers, FetchCooldownMs: ms(s.FetchCooldown), FetchPollIntervalMs: ms(s.FetchPollInterval), JobsPerS: round(rate, 1)}
		res.RiverRuns = append(res.RiverRuns, run)
		if run.JobsPerS > res.RiverJobsPerS {
			res.RiverJobsPerS, res.RiverWorkers = run.JobsPerS, run.Workers
			res.RiverFetchCooldownMs, res.RiverFetchPollIntervalMs = run.FetchCooldownMs, run.FetchPollIntervalMs
		}
	}
	return nil
}

// backlogPhase measures the drain from the small backlog, then from the
// large one, then drains the rest of the large one and counts the dead
// tuples it left (dead_tuples_after).
func (r *runner) backlogPhase(ctx context.Context, res *Result) error {
	res.BacklogRows, res.BacklogSmallRows, res.BacklogMeasuredRows = r.sizes.BacklogLarge, r.sizes.BacklogSmall, r.sizes.BacklogMeasured
	small, err := r.backlog(ctx, r.sizes.BacklogSmall, true)
	if err != nil {
		return err
	}
	large, err := r.backlog(ctx, r.sizes.BacklogLarge, false)
	if err != nil {
		return err
	}
	res.BacklogSmallRowsPerS, res.BacklogLargeRowsPerS = round(small, 1), round(large, 1)
	res.DeadTuplesAfter, err = r.deadTuplesAfterDrain(ctx, r.sizes.BacklogLarge)
	return err
}

// halfLoad and lightLoad are the shares of the drain rate the producers
// offer in the two latency runs (docs/reference.md §8).
const (
	halfLoad  = 0.5
	lightLoad = 0.1
)

// latencyPhase measures the latency with producers offering a tenth of the
// best drain rate, then half of it (docs/reference.md §8).
func (r *runner) latencyPhase(ctx context.Context, res *Result) error {
	light, err := r.latency(ctx, res.DrainRowsPerS*lightLoad, "a tenth")
	if err != nil {
		return err
	}
	half, err := r.latency(ctx, res.DrainRowsPerS*halfLoad, "half")
	if err != nil {
		return err
	}
	res.LatencyP50Ms, res.LatencyP90Ms, res.LatencyP99Ms = round(light.p50, 2), round(light.p90, 2), round(light.p99, 2)
	res.LatencyOfferedRowsPerS, res.LatencyAchievedRowsPerS = round(light.offered, 1), round(light.achieved, 1)
	res.LatencyProducers, res.LatencyRowsPerXact = latencyProducers, round(light.rowsPerXact, 2)
	res.LatencySamples, res.LatencyUndispatched = light.samples, light.undispatched
	res.LatencyPollPickups, res.LatencyClaimedRows = int(light.claimed["poll"]), light.claimed
	res.LatencyHalfP50Ms, res.LatencyHalfP90Ms, res.LatencyHalfP99Ms = round(half.p50, 2), round(half.p90, 2), round(half.p99, 2)
	res.LatencyHalfOfferedRowsPerS, res.LatencyHalfAchievedRowsPerS = round(half.offered, 1), round(half.achieved, 1)
	res.LatencyHalfRowsPerXact = round(half.rowsPerXact, 2)
	res.LatencyHalfSamples, res.LatencyHalfUndispatched = half.samples, half.undispatched
	res.LatencyHalfPollPickups = int(half.claimed["poll"])
	return nil
}

// setRatios sets the ratios and the audit cost from the rounded figures,
// so they agree with what is printed, and reports every ratio that cannot
// be formed.
func setRatios(res *Result) error {
	var errs []error
	res.RatioVsRiver, errs = ratio(res.DrainRowsPerS, res.RiverJobsPerS, "river_jobs_per_s", errs)
	res.RatioVsCeiling, errs = ratio(res.DrainRowsPerS, res.CeilingRowsPerS, "ceiling_rows_per_s", errs)
	res.BacklogRatio, errs = ratio(res.BacklogLargeRowsPerS, res.BacklogSmallRowsPerS, "backlog_small_rows_per_s", errs)
	res.LatencyAchievedRatio, errs = ratio(res.LatencyAchievedRowsPerS, res.LatencyOfferedRowsPerS, "latency_offered_rows_per_s", errs)
	res.LatencyHalfAchievedRatio, errs = ratio(res.LatencyHalfAchievedRowsPerS, res.LatencyHalfOfferedRowsPerS, "latency_half_offered_rows_per_s", errs)
	res.XminRatio, errs = ratio(res.XminRowsPerS, res.XminBaselineRowsPerS, "xmin_baseline_rows_per_s", errs)
	res.EnqueueVsInsert, errs = ratio(res.EnqueueSingleRowsPerS, res.InsertSingleRowsPerS, "insert_single_rows_per_s", errs)
	var withOver float64
	withOver, errs = ratio(res.DrainRowsPerS, res.DrainNoAuditRowsPerS, "drain_no_audit_rows_per_s", errs)
	res.AuditCost = round(1-withOver, 3)
	return errors.Join(errs...)
}
