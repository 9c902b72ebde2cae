package dispatch

import (
	"net/http"
	"sync/atomic"
	"time"
)

// skew shifts Now: a test-only setting (`drainer run` reads
// DRAINER_TEST_CLOCK_SKEW) that plays a replica whose clock is wrong. The
// database clock rules scheduling and leases; the only wall-clock reading
// that reaches a decision is the measure of an HTTP-date Retry-After, and
// RetryAfter takes it against the provider's own Date header when it sends
// one, so a wrong clock here moves nothing.
var skew atomic.Int64

// SetClockSkew shifts every later Now by d (tests only).
func SetClockSkew(d time.Duration) { skew.Store(int64(d)) }

// Now is the wall clock adapters read: time.Now, shifted by SetClockSkew.
func Now() time.Time { return time.Now().Add(time.Duration(skew.Load())) }

// RetryAfter returns the floor a response's Retry-After asks for (0 if none
// or unparseable). An HTTP-date is measured against the response's Date
// header, the provider's clock, so that clock skew between the provider and
// this process neither shortens nor lengthens the wait; without a Date
// header it is measured against Now.
func RetryAfter(h http.Header) time.Duration {
	now := Now()
	if d, err := http.ParseTime(h.Get("Date")); err == nil {
		now = d
	}
	ra, _ := ParseRetryAfter(h.Get("Retry-After"), now)
	return ra
}
