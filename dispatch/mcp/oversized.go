package mcp

import (
	"encoding/json"
	"sync"
	"time"
)

// oversizedCache keeps the few latest tool results too large to record
// (Config.RecordLimit), each for oversizedTTL, at most oversizedBytes in
// all: long enough for the gateway's call that waits for the row in this
// process to be answered with the whole result. Nothing else reads them.
// They go when their time is over, calls or not: a timer, armed while
// the cache holds any, expires them (an idle process held them until the
// next call before: 40 results of 3 MB, 85 MB of heap).
type oversizedCache struct {
	mu      sync.Mutex
	entries []oversizedEntry // oldest first
	bytes   int
	ttl     time.Duration // oversizedTTL (shorter in tests)
	timer   *time.Timer   // armed while entries are kept
	stopped bool
}

type oversizedEntry struct {
	key string
	rec json.RawMessage
	at  time.Time
}

const (
	oversizedTTL   = 2 * time.Minute
	oversizedBytes = 64 << 20
)

func (c *oversizedCache) put(key string, rec json.RawMessage) {
	if key == "" || len(rec) > oversizedBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return
	}
	c.expire(time.Now())
	c.entries = append(c.entries, oversizedEntry{key: key, rec: rec, at: time.Now()})
	c.bytes += len(rec)
	for c.bytes > oversizedBytes {
		c.bytes -= len(c.entries[0].rec)
		c.entries[0] = oversizedEntry{} // the record goes with it, not with the array
		c.entries = c.entries[1:]
	}
	c.arm()
}

// arm sets the timer for the oldest entry's end, if none is set (c.mu
// held).
func (c *oversizedCache) arm() {
	if c.timer != nil || len(c.entries) == 0 {
		return
	}
	c.timer = time.AfterFunc(time.Until(c.entries[0].at.Add(c.lifetime()))+time.Millisecond, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.timer = nil
		if !c.stopped {
			c.expire(time.Now())
			c.arm()
		}
	})
}

// stop drops every entry and the timer (the adapter closes).
func (c *oversizedCache) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	clear(c.entries)
	c.entries, c.bytes = nil, 0
}

func (c *oversizedCache) lifetime() time.Duration {
	if c.ttl > 0 {
		return c.ttl
	}
	return oversizedTTL
}

func (c *oversizedCache) get(key string) (json.RawMessage, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expire(time.Now())
	for i := len(c.entries) - 1; i >= 0; i-- {
		if c.entries[i].key == key {
			return c.entries[i].rec, true
		}
	}
	return nil, false
}

// expire drops the entries kept their lifetime (c.mu held).
func (c *oversizedCache) expire(now time.Time) {
	n := 0
	for n < len(c.entries) && now.Sub(c.entries[n].at) >= c.lifetime() {
		c.bytes -= len(c.entries[n].rec)
		n++
	}
	clear(c.entries[:n]) // their records go now, not when the array is replaced
	c.entries = c.entries[n:]
}
