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
type oversizedCache struct {
	mu      sync.Mutex
	entries []oversizedEntry // oldest first
	bytes   int
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
	c.expire(time.Now())
	c.entries = append(c.entries, oversizedEntry{key: key, rec: rec, at: time.Now()})
	c.bytes += len(rec)
	for c.bytes > oversizedBytes {
		c.bytes -= len(c.entries[0].rec)
		c.entries[0] = oversizedEntry{} // the record goes with it, not with the array
		c.entries = c.entries[1:]
	}
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

// expire drops the entries older than oversizedTTL (c.mu held).
func (c *oversizedCache) expire(now time.Time) {
	n := 0
	for n < len(c.entries) && now.Sub(c.entries[n].at) > oversizedTTL {
		c.bytes -= len(c.entries[n].rec)
		n++
	}
	clear(c.entries[:n]) // their records go now, not when the array is replaced
	c.entries = c.entries[n:]
}
