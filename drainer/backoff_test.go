package drainer

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestFullJitterBounds(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	base, cap := time.Second, 10*time.Minute
	for k := 1; k <= 100; k++ {
		want := cap
		if k-1 < 30 {
			want = min(cap, base*time.Duration(1<<(k-1)))
		}
		for range 200 {
			d := FullJitter(r, k, base, cap)
			if d < 0 || d >= want {
				t.Fatalf("k=%d: delay %v outside [0, %v)", k, d, want)
			}
		}
	}
}

func TestFullJitterNoOverflow(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	for _, k := range []int{63, 64, 65, 100, 1000, math.MaxInt32, math.MaxInt} {
		d := FullJitter(r, k, time.Hour, math.MaxInt64)
		if d < 0 {
			t.Fatalf("k=%d: negative delay %v", k, d)
		}
		d = FullJitter(r, k, time.Second, time.Minute)
		if d < 0 || d >= time.Minute {
			t.Fatalf("k=%d: delay %v outside [0, 1m)", k, d)
		}
	}
	if d := FullJitter(r, 0, time.Second, time.Minute); d >= time.Second {
		t.Fatalf("k=0 is treated as the first attempt, got %v", d)
	}
}

// TestFullJitterUniform checks, with a fixed seed, that delays spread evenly over
// [0, ceil): a chi-square test over 20 buckets.
func TestFullJitterUniform(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(42, 42))
	const n, buckets = 100000, 20
	base, cap := 100*time.Millisecond, time.Hour
	k := 4 // ceil = 800ms
	ceil := 800 * time.Millisecond
	var counts [buckets]int
	var sum float64
	for range n {
		d := FullJitter(r, k, base, cap)
		counts[int(d*buckets/ceil)]++
		sum += float64(d)
	}
	expected := float64(n) / buckets
	var chi2 float64
	for _, c := range counts {
		chi2 += (float64(c) - expected) * (float64(c) - expected) / expected
	}
	// 19 degrees of freedom: p = 0.001 critical value is 43.8.
	if chi2 > 43.8 {
		t.Fatalf("delays are not uniform: chi2 = %.1f, counts %v", chi2, counts)
	}
	if mean := time.Duration(sum / n); mean < 390*time.Millisecond || mean > 410*time.Millisecond {
		t.Fatalf("mean delay %v, want about 400ms", mean)
	}
}

func TestDelayRetryAfterFloorAndCap(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	b := Backoff{Base: time.Second, Cap: 10 * time.Second, MaxRetryAfter: time.Minute}
	for range 1000 {
		if d := b.Delay(r, 1, 30*time.Second); d != 30*time.Second {
			t.Fatalf("Retry-After 30s must be the floor over a jitter below 1s, got %v", d)
		}
		if d := b.Delay(r, 1, 2*time.Hour); d != time.Minute {
			t.Fatalf("Retry-After 2h must be capped at max_retry_after 1m, got %v", d)
		}
		if d := b.Delay(r, 10, 0); d >= 10*time.Second {
			t.Fatalf("delay %v above cap", d)
		}
		if d := b.Delay(r, 10, -time.Second); d < 0 {
			t.Fatalf("negative delay %v", d)
		}
	}
	// A floor below the jitter does not shorten it: over many draws some exceed it.
	var above int
	for range 1000 {
		if b.Delay(r, 4, 100*time.Millisecond) > 100*time.Millisecond {
			above++
		}
	}
	if above < 900 {
		t.Fatalf("floor should not replace larger jittered delays; only %d of 1000 above the floor", above)
	}
}
