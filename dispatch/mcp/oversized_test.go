package mcp

import (
	"encoding/json"
	"runtime"
	"strconv"
	"testing"
	"time"
	"weak"
)

// TestOversizedCacheLetsEvictedRecordsGo: a record the cache evicts (its
// bytes over oversizedBytes) is no longer referenced by the cache, so its
// memory is freed; before, the evicted entries stayed in the slice's
// backing array, and after 63 records of 1 MiB and a few of 15 MiB the
// heap held 213 MiB for a cache bounded at 64.
func TestOversizedCacheLetsEvictedRecordsGo(t *testing.T) {
	var c oversizedCache
	const size = 8 << 20
	var first []weak.Pointer[byte]
	for i := range 3 {
		rec := make(json.RawMessage, size)
		first = append(first, weak.Make(&rec[0]))
		c.put("early-"+strconv.Itoa(i), rec)
	}
	for i := range oversizedBytes / size {
		c.put("late-"+strconv.Itoa(i), make(json.RawMessage, size))
	}
	if _, ok := c.get("early-0"); ok {
		t.Fatal("the first record is still cached past the cache's bound")
	}
	runtime.GC()
	runtime.GC()
	for i, p := range first {
		if p.Value() != nil {
			t.Fatalf("evicted record %d is still referenced by the cache", i)
		}
	}
	if c.bytes > oversizedBytes {
		t.Fatalf("the cache holds %d bytes, over its bound %d", c.bytes, oversizedBytes)
	}
}

// TestOversizedExpireWithoutCalls: a kept result goes once its time is
// over with no put or get after it (an idle process held every result
// until the next call before); a closed cache keeps nothing and no timer.
func TestOversizedExpireWithoutCalls(t *testing.T) {
	c := oversizedCache{ttl: 50 * time.Millisecond}
	c.put("k1", json.RawMessage(`{"a":1}`))
	c.put("k2", json.RawMessage(`{"b":2}`))
	deadline := time.Now().Add(time.Minute)
	for {
		c.mu.Lock()
		n, b := len(c.entries), c.bytes
		c.mu.Unlock()
		if n == 0 && b == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d results (%d bytes) still kept a minute after their 50ms, with no call", n, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.put("k3", json.RawMessage(`{"c":3}`))
	c.stop()
	c.put("k4", json.RawMessage(`{"d":4}`))
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) != 0 || c.timer != nil {
		t.Fatalf("after stop: %d entries, timer %v", len(c.entries), c.timer != nil)
	}
}
