package ops

import (
	"bytes"
	"fmt"
	"testing"
)

// TestVectorBuilderKeepsOnlyTheKeysAsked: digesting a ledger record holds
// no key, whatever the record's size (a million-entry record held every
// key: 183 MiB for a verify that printed one line); only the buckets a
// verify found differing are read again with their keys kept, and keeping
// them changes nothing of the digest.
func TestVectorBuilderKeepsOnlyTheKeysAsked(t *testing.T) {
	t.Parallel()
	const n, buckets = 5000, 16
	held := func(v *vectorBuilder) (keys int) {
		for _, ks := range v.keys {
			keys += len(ks)
		}
		return keys
	}
	all := newVectorBuilder(buckets)
	b := bucketOf("key-7", buckets)
	kept := newVectorBuilder(buckets, b)
	inB := 0
	for i := range n {
		key := fmt.Sprint("key-", i)
		all.add(key, int64(i), []byte{byte(i)})
		kept.add(key, int64(i), []byte{byte(i)})
		if bucketOf(key, buckets) == b {
			inB++
		}
	}
	if got := held(all); got != 0 {
		t.Errorf("a digest without buckets to keep holds %d keys, want none", got)
	}
	if got := held(kept); got != inB || !kept.keys[b]["key-7"] {
		t.Errorf("kept bucket %d: %d keys held (key-7 among them: %v), want its %d", b, got, kept.keys[b]["key-7"], inB)
	}
	if !bytes.Equal(all.vector(), kept.vector()) || all.items != kept.items {
		t.Error("keeping a bucket's keys changed the digest")
	}
}
