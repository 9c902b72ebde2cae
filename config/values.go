package config

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Parsers of scalar values. A returned message, when not empty, has one %s
// verb for the value as written (the caller fills it, so that an expanded
// value never reaches a message).

// parseDuration parses a Go duration ("30s", "10m", "1h30m").
func parseDuration(text string) (time.Duration, string) {
	t := strings.TrimSpace(text)
	v, err := time.ParseDuration(t)
	switch {
	case err == nil:
		return v, ""
	case isNumber(t):
		return 0, `must be a duration with a unit, like "10s", got %s`
	case dayUnit.MatchString(t):
		return 0, `invalid duration %s: units are ns, us, ms, s, m and h (write days as hours, e.g. "24h")`
	}
	return 0, `invalid duration %s: write a duration like "30s", "10m" or "1h30m"`
}

// dayUnit spots a day, week or year unit ("1d", "2w", "1d12h").
var dayUnit = regexp.MustCompile(`\d[dwy]`)

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
