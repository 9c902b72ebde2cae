package drainer

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// claimCause is why the claim loop ran a claim. Every row a claim leases is
// counted under the cause of the loop's wake-up that led to it (the claims
// that follow a full one, and the claim right after arming the wake gate,
// share it): ClaimedRows, drainer_claimed_rows_total{cause}, and bench's
// latency_poll_pickups, the rows of its light-load phase claimed by a poll
// (docs/reference.md §7 and §8).
type claimCause uint8

const (
	causeStart  claimCause = iota // the engine started
	causeNotify                   // a producer's notification: the wake-up worked
	causeRearm                    // the wake-up was re-armed (listener or gate connection back): notifications may have been lost
	causeSignal                   // another loop: a reload, a deferral's wake, a reclaim, queued compensations
	causeSlots                    // worker slots freed while the loop waited for them (refill)
	causeRetry                    // the loop's own retry: an owed full pass, a gate still arming
	causePoll                     // the poll timer, and nothing else: the wake-up missed these rows
	numCauses
)

// causeNames are the label values of drainer_claimed_rows_total, by cause.
var causeNames = [numCauses]string{"start", "notify", "rearm", "signal", "slots", "retry", "poll"}

func (c claimCause) String() string { return causeNames[c] }

// claimCounts counts claimed rows by cause.
type claimCounts [numCauses]atomic.Uint64

func (c *claimCounts) add(cause claimCause, rows int) {
	if rows > 0 {
		c[cause].Add(uint64(rows))
	}
}

// ClaimedRows returns how many rows this engine has claimed, by why the
// claim ran: "notify" (a producer's notification), "rearm" (the wake-up's
// connections came back), "slots" (worker slots freed), "signal" (another
// loop of the engine), "retry", "start", and "poll": the rows the wake-up
// missed, found by the poll timer.
func (e *Engine) ClaimedRows() map[string]uint64 {
	out := make(map[string]uint64, numCauses)
	for c := range numCauses {
		out[causeNames[c]] = e.claims[c].Load()
	}
	return out
}

// wakeFor wakes the claim loop and tells it why: the next claim counts
// under the most telling cause given since the loop last woke.
func (e *Engine) wakeFor(c claimCause) {
	e.wakeWhy.Or(1 << c)
	e.signal()
}

// takeWakeCause returns the cause of the claims the loop is about to run:
// the first given by wakeFor since it last asked, in the order of the
// causes (a notification first), or else what woke it (fallback).
func (e *Engine) takeWakeCause(fallback claimCause) claimCause {
	why := e.wakeWhy.Swap(0)
	for c := range numCauses {
		if why&(1<<c) != 0 {
			return c
		}
	}
	return fallback
}

// ClaimCollector exports ClaimedRows as drainer_claimed_rows_total{cause},
// every cause from startup. Register it once on the registry of the
// engine's Metrics.
func (e *Engine) ClaimCollector() prometheus.Collector {
	return &claimCollector{e: e, desc: prometheus.NewDesc("drainer_claimed_rows_total",
		"Rows claimed, by why the claim ran: notify (a producer's notification), poll (the poll timer: the wake-up missed them), slots, rearm, signal, retry, start.",
		[]string{"cause"}, nil)}
}

type claimCollector struct {
	e    *Engine
	desc *prometheus.Desc
}

func (c *claimCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *claimCollector) Collect(ch chan<- prometheus.Metric) {
	for cause := range numCauses {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(c.e.claims[cause].Load()), causeNames[cause])
	}
}
