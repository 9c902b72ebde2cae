package config

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	units "github.com/docker/go-units"
)

// Parsers of scalar values. A returned message, when not empty, has one %s
// verb for the value as written (the caller fills it, so that an expanded
// value never reaches a message).

// parseDuration parses a Go duration ("30s", "10m", "1h30m"), optionally
// led by whole days ("7d", "1d12h"; a day is 24h).
func parseDuration(text string) (time.Duration, string) {
	t := strings.TrimSpace(text)
	var days time.Duration
	if m := leadingDays.FindStringSubmatch(t); m != nil {
		n, err := strconv.ParseInt(m[1], 10, 32)
		if err != nil || n > maxDays {
			return 0, `duration %s is too long (at most 106751d)`
		}
		days, t = time.Duration(n)*24*time.Hour, m[2]
		if t == "" {
			return days, ""
		}
	}
	v, err := time.ParseDuration(t)
	switch {
	case err == nil && v >= 0 && days > math.MaxInt64-v:
		return 0, `duration %s is too long (at most 106751d)`
	case err == nil && days > 0 && v < 0:
		return 0, `invalid duration %s: write a duration like "30s", "10m", "1h30m" or "7d"`
	case err == nil:
		return days + v, ""
	case isNumber(t) && days == 0:
		return 0, `must be a duration with a unit, like "10s", got %s`
	case otherUnit.MatchString(t):
		return 0, `invalid duration %s: units are ns, us, ms, s, m, h and d (write weeks and years as days, e.g. "14d")`
	}
	return 0, `invalid duration %s: write a duration like "30s", "10m", "1h30m" or "7d"`
}

// leadingDays splits "7d" or "1d12h" into the days and the rest.
var leadingDays = regexp.MustCompile(`^(\d+)d(.*)$`)

// maxDays is the most days a time.Duration holds.
const maxDays = 106751

// otherUnit spots a week or year unit ("2w", "1y").
var otherUnit = regexp.MustCompile(`\d[wy]`)

func isNumber(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

// maxRate bounds a rate limit, so that its burst fits an int.
const maxRate = 1e9

// parseRateLimit parses "N/s", "N/m" or "N/h" (N a positive number). The
// burst is the rate per second rounded up, at least 1.
func parseRateLimit(text string) (*RateLimit, string) {
	t := strings.TrimSpace(text)
	num, unit, ok := strings.Cut(t, "/")
	per := map[string]float64{"s": 1, "m": 60, "h": 3600}[strings.TrimSpace(unit)]
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	switch {
	case !ok || per == 0 || err != nil || math.IsNaN(n) || math.IsInf(n, 0):
		return nil, `invalid rate limit %s: write N/s, N/m or N/h, e.g. "100/s"`
	case n <= 0:
		return nil, "rate limit must be positive, got %s"
	case n/per > maxRate:
		return nil, "rate limit %s is too high (at most 1000000000/s)"
	}
	ps := n / per
	return &RateLimit{PerSecond: ps, Burst: max(1, int(math.Ceil(ps))), Text: t}, ""
}

// formatDuration renders a duration as written in configs: "1m", not "1m0s".
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// ByteSize is a number of bytes, written as an integer or with a binary
// unit: 65536, 64KiB, 32MiB, 1GiB.
type ByteSize int64

// parseByteSize reads a ByteSize; the message says what is wrong.
func parseByteSize(text string) (ByteSize, string) {
	t := strings.TrimSpace(text)
	if t == "" {
		return 0, "must be a size like 32MiB, got %s"
	}
	if isNumber(t) {
		n, err := strconv.ParseInt(t, 10, 64)
		if err != nil {
			return 0, "must be a size like 32MiB, got %s"
		}
		return ByteSize(n), ""
	}
	// binary units only, spelled as in the docs (KiB, MiB, GiB); a
	// decimal unit (MB) or a bare letter is refused as ambiguous
	u := t[len(strings.TrimRight(t, "KMGiB")):]
	switch u {
	case "KiB", "MiB", "GiB":
	default:
		return 0, "must be a size like 32MiB (bytes, or KiB, MiB or GiB), got %s"
	}
	n, err := units.RAMInBytes(t)
	if err != nil || n < 0 {
		return 0, "must be a size like 32MiB (bytes, or KiB, MiB or GiB), got %s"
	}
	return ByteSize(n), ""
}

// String writes b with the largest binary unit that divides it.
func (b ByteSize) String() string {
	for _, u := range []struct {
		n    ByteSize
		name string
	}{{1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if b >= u.n && b%u.n == 0 {
			return strconv.FormatInt(int64(b/u.n), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(b), 10)
}
