package config

import (
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	for text, want := range map[string]time.Duration{
		"30s": 30 * time.Second, "10m": 10 * time.Minute, "1h30m": 90 * time.Minute, "250ms": 250 * time.Millisecond,
		" 2s ": 2 * time.Second, "-1s": -time.Second, "0": 0,
		"7d": 7 * 24 * time.Hour, "1d12h": 36 * time.Hour, "0d": 0, "1d30s": 24*time.Hour + 30*time.Second,
	} {
		if got, msg := parseDuration(text); got != want || msg != "" {
			t.Errorf("parseDuration(%q) = %v, %q", text, got, msg)
		}
	}
	for _, text := range []string{"2w", "1y", "10", "1.5", "soon", "", "1h 30m", "1d-1h", "d", "1dd", "999999d", "106751d24h"} {
		if _, msg := parseDuration(text); msg == "" {
			t.Errorf("parseDuration(%q) accepted", text)
		}
	}
}

func TestParseRateLimit(t *testing.T) {
	for _, tt := range []struct {
		text      string
		perSecond float64
		burst     int
	}{
		{"100/s", 100, 100},
		{"1/s", 1, 1},
		{"0.5/s", 0.5, 1},
		{"90/m", 1.5, 2},
		{"30/m", 0.5, 1},
		{"3600/h", 1, 1},
		{"7200/h", 2, 2},
		{"2.5/s", 2.5, 3},
		{" 10 / s", 10, 10},
	} {
		rl, msg := parseRateLimit(tt.text)
		if msg != "" || rl.PerSecond != tt.perSecond || rl.Burst != tt.burst {
			t.Errorf("parseRateLimit(%q) = %+v, %q", tt.text, rl, msg)
		}
	}
	for _, text := range []string{"100", "100/d", "/s", "x/s", "0/s", "-1/s", "NaN/s", "Inf/s", "1e10/s", "100/sec"} {
		if rl, msg := parseRateLimit(text); msg == "" {
			t.Errorf("parseRateLimit(%q) accepted: %+v", text, rl)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Minute: "1m", time.Hour: "1h", 90 * time.Minute: "1h30m", 30 * time.Second: "30s",
		61 * time.Second: "1m1s", time.Hour + time.Second: "1h0m1s", 1500 * time.Millisecond: "1.5s",
	} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestClosest(t *testing.T) {
	names := []string{"workers", "lease", "unrouted_recheck", "adapters", "routes"}
	for name, want := range map[string]string{
		"workerz": "workers", "Workers": "workers", "leese": "lease", "unrouted-recheck": "unrouted_recheck",
		"route": "routes", "colour": "", "a": "", "": "",
	} {
		if got := closest(name, names); got != want {
			t.Errorf("closest(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestParseByteSize(t *testing.T) {
	for text, want := range map[string]ByteSize{
		"65536": 65536, "64KiB": 64 << 10, "32MiB": 32 << 20, "1GiB": 1 << 30, "1.5GiB": 3 << 29, "32 MiB": 32 << 20,
	} {
		if got, msg := parseByteSize(text); msg != "" || got != want {
			t.Errorf("parseByteSize(%q) = %d, %q; want %d", text, got, msg, want)
		}
	}
	for _, text := range []string{"", "12MB", "1k", "-1MiB", "MiB", "1e6", "ten"} {
		if got, msg := parseByteSize(text); msg == "" {
			t.Errorf("parseByteSize(%q) = %d; want an error", text, got)
		}
	}
	for b, want := range map[ByteSize]string{32 << 20: "32MiB", 64 << 10: "64KiB", 1 << 30: "1GiB", 1000: "1000", 3 << 29: "1536MiB"} {
		if got := b.String(); got != want {
			t.Errorf("ByteSize(%d).String() = %q, want %q", int64(b), got, want)
		}
	}
}
