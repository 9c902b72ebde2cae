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
// large one.
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
	return nil
}

// lightLoad is the share of the drain rate the producers offer in the
// light-load latency run.
const lightLoad = 0.1

// latencyPhase measures the latency with producers offering half the best
// drain rate (docs/reference.md §8), then a tenth of it.
func (r *runner) latencyPhase(ctx context.Context, res *Result) error {
	lat, err := r.latency(ctx, res.DrainRowsPerS/2, "half")
	if err != nil {
		return err
	}
	light, err := r.latency(ctx, res.DrainRowsPerS*lightLoad, "a tenth")
	if err != nil {
		return err
	}
	res.LatencyLightP50Ms, res.LatencyLightP90Ms, res.LatencyLightP99Ms = round(light.p50, 2), round(light.p90, 2), round(light.p99, 2)
	res.LatencyLightOfferedRowsPerS = round(light.offered, 1)
	if light.offered > 0 {
		res.LatencyLightAchievedRatio = round(light.achieved/light.offered, 3)
	}
	res.LatencyP50Ms, res.LatencyP90Ms, res.LatencyP99Ms = round(lat.p50, 2), round(lat.p90, 2), round(lat.p99, 2)
	res.LatencyOfferedRowsPerS, res.LatencyAchievedRowsPerS = round(lat.offered, 1), round(lat.achieved, 1)
	res.LatencyProducers, res.LatencyRowsPerXact = latencyProducers, round(lat.rowsPerXact, 2)
	res.LatencySamples, res.LatencyUndispatched = lat.samples, lat.undispatched
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
	res.XminRatio, errs = ratio(res.XminRowsPerS, res.XminBaselineRowsPerS, "xmin_baseline_rows_per_s", errs)
	res.EnqueueVsInsert, errs = ratio(res.EnqueueSingleRowsPerS, res.InsertSingleRowsPerS, "insert_single_rows_per_s", errs)
	var withOver float64
	withOver, errs = ratio(res.DrainRowsPerS, res.DrainNoAuditRowsPerS, "drain_no_audit_rows_per_s", errs)
	res.AuditCost = round(1-withOver, 3)
	return errors.Join(errs...)
}
