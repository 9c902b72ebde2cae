package conformance

import (
	"context"
	"fmt"
)

// Run probes the endpoint of o with every check, in the order of Checks,
// and returns the report. An error is either a set of *OptionError (nothing
// was sent) or the cancellation of ctx; a failing endpoint is a report whose
// Passed is false, never an error.
func Run(ctx context.Context, o Options) (Report, error) {
	o, u, err := o.withDefaults()
	if err != nil {
		return Report{}, err
	}
	p := newProber(o, u)
	defer p.close()
	m := o.Mode
	rep := Report{URL: Display(u), Method: o.Method, Mode: m, Concurrency: o.Concurrency}
	add := func(r Result) { rep.Checks = append(rep.Checks, r) }

	// first-write, replay, payload-mismatch: one key, three requests.
	t := freshTuple(CheckFirstWrite)
	first := p.send(ctx, p.client, t.Key(), t.Encoded(), o.Payload)
	add(judgeFirstWrite(first))
	var again, mismatch Answer
	if first.success() {
		again = p.send(ctx, p.client, t.Key(), t.Encoded(), o.Payload)
		mismatch = p.send(ctx, p.client, t.Key(), t.Encoded(), variant(o.Payload))
	}
	add(judgeReplay(m, first, again))
	add(judgePayloadMismatch(m, first, mismatch))

	// in-flight, one-effect: bursts of one fresh key each, until one shows
	// an in-flight answer, a problem, or the rounds run out.
	var rounds []burst
	for range o.Rounds {
		if ctx.Err() != nil {
			break
		}
		b := p.burst(ctx, m, o.Concurrency, o.Payload)
		rounds = append(rounds, b)
		if t := count(m, b); t.inFlight > 0 || t.first != 1 || t.other > 0 {
			break
		}
	}
	add(judgeInFlight(m, rounds))
	add(judgeOneEffect(m, rounds))

	// missing-key: no key, no tuple.
	add(judgeMissingKey(p.send(ctx, p.client, "", "", o.Payload)))
	// tuple-mismatch: a fresh key with the tuple header of another one.
	k, other := freshTuple(CheckTupleMismatch), freshTuple(CheckTupleMismatch)
	add(judgeTupleMismatch(p.send(ctx, p.client, k.Key(), other.Encoded(), o.Payload)))

	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("conformance interrupted: %w", err)
	}
	rep.Passed = len(rep.Failed()) == 0
	return rep, nil
}
