package drainer

import (
	"math/rand/v2"
	"time"
)

// Backoff is the Full Jitter policy of one route.
type Backoff struct {
	Base          time.Duration
	Cap           time.Duration
	MaxRetryAfter time.Duration
}

// FullJitter returns a delay drawn uniformly from [0, min(cap, base·2^(k-1)))
// after the k-th consumed attempt failed (k = 1, 2, …). It never overflows:
// base·2^(k-1) is only computed when it cannot exceed cap.
func FullJitter(r *rand.Rand, k int, base, cap time.Duration) time.Duration {
	k = max(k, 1)
	ceil := cap
	if shift := uint(k - 1); shift < 63 && base <= cap>>shift {
		ceil = base << shift
	}
	if ceil <= 0 {
		return 0
	}
	return time.Duration(r.Int64N(int64(ceil)))
}

// Delay returns the wait before the next attempt: the jittered delay, floored
// by retryAfter capped at MaxRetryAfter.
func (b Backoff) Delay(r *rand.Rand, k int, retryAfter time.Duration) time.Duration {
	d := FullJitter(r, k, b.Base, b.Cap)
	floor := min(max(retryAfter, 0), b.MaxRetryAfter)
	return max(d, floor)
}
