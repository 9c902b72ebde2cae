package ops

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"slices"
	"strconv"
	"strings"

	"github.com/drainer-io/drainer/store"
)

// The audit's hash functions, as the database computes them
// (migrations/code/functions/audit_hash.sql, audit_ledger_hash.sql,
// audit_anchor_hash.sql, audit_bucket.sql, audit_entries_vector.sql).
// `drainer audit verify --checkpoints` recomputes in Go what a signed
// checkpoint covers, so that it does not take the database's functions'
// word for it: whoever can write the database can also replace them.
// TestAuditHashesEqualTheDatabase holds each equal to its SQL.

const unitSep = "\x1f"

// EntryHash is an audit entry's hash (audit_hash): SHA-256 of the previous
// hash and the entry's fields.
func EntryHash(e *store.RawAuditEntry) []byte {
	h := sha256.New()
	h.Write(e.PrevHash)
	h.Write([]byte(strings.Join([]string{
		e.Key, strconv.FormatInt(e.At.UnixMicro(), 10), e.Event, str(e.FromStatus), str(e.ToStatus),
		i32(e.Attempts), i32(e.ResponseStatus), e.Actor, str(e.Reason), hex.EncodeToString(e.DetailSHA256),
	}, unitSep)))
	return h.Sum(nil)
}

// LedgerHash is a ledger record's hash (audit_ledger_hash): SHA-256 of
// the record before it and every field but the vector (its digest is
// covered).
func LedgerHash(r *store.LedgerRecord) []byte {
	h := sha256.New()
	h.Write(r.Prev)
	h.Write([]byte(strings.Join([]string{
		"ledger", strconv.FormatInt(r.N, 10), r.Kind, i64(r.Epoch), i16(r.Part), i64(r.FromID), i64(r.UptoID),
		strconv.FormatInt(r.Items, 10), strconv.FormatInt(int64(r.Buckets), 10), hex.EncodeToString(r.Digest),
		strconv.FormatInt(r.At.UnixMicro(), 10),
	}, unitSep)))
	return h.Sum(nil)
}

// AnchorHash is an anchor version's hash (audit_anchor_hash).
func AnchorHash(v *store.AnchorVersion) []byte {
	return sha256Of(strings.Join([]string{
		"anchor", strconv.FormatInt(v.Vid, 10), hexSHA(&v.Key), hex.EncodeToString(v.Hash), i64(v.LastID),
		hexSHA(v.Status), i32(v.Attempts), hexSHA(v.Problem), i64(v.Record),
	}, unitSep))
}

// bucketOf is the bucket of key among buckets (audit_bucket): the first
// two bytes of its SHA-256, modulo buckets.
func bucketOf(key string, buckets int32) int32 {
	sum := sha256.Sum256([]byte(key))
	return int32(binary.BigEndian.Uint16(sum[:2])) % buckets
}

// vectorBuilder digests a ledger record's items, in the order the
// database does (id order within each bucket). It remembers the keys of
// the buckets named in keep only (to name them when the vector differs
// from another): a record holds up to a generation's entries or a
// truncation's anchors, and keeping every key would make a verify's memory
// grow with the record, not with what it finds.
type vectorBuilder struct {
	buckets int32
	items   int64
	h       map[int32]hash.Hash
	keep    map[int32]bool
	keys    map[int32]map[string]bool
}

func newVectorBuilder(buckets int32, keep ...int32) *vectorBuilder {
	v := &vectorBuilder{buckets: max(buckets, 1), h: map[int32]hash.Hash{}, keep: map[int32]bool{}, keys: map[int32]map[string]bool{}}
	for _, b := range keep {
		v.keep[b], v.keys[b] = true, map[string]bool{}
	}
	return v
}

// add digests an item (an entry's id and hash, an anchor's vid and row
// hash); items come in id order.
func (v *vectorBuilder) add(key string, id int64, itemHash []byte) {
	b := bucketOf(key, v.buckets)
	h, ok := v.h[b]
	if !ok {
		h = sha256.New()
		v.h[b] = h
	}
	var idb [8]byte
	binary.BigEndian.PutUint64(idb[:], uint64(id))
	h.Write(idb[:])
	h.Write(itemHash)
	if v.keep[b] {
		v.keys[b][key] = true
	}
	v.items++
}

// vector is what audit_entries_vector and audit_anchors_vector return:
// each non-empty bucket's number (4 bytes) and digest, in bucket order.
func (v *vectorBuilder) vector() []byte {
	bs := make([]int32, 0, len(v.h))
	for b := range v.h {
		bs = append(bs, b)
	}
	slices.Sort(bs)
	out := make([]byte, 0, len(bs)*36)
	for _, b := range bs {
		out = binary.BigEndian.AppendUint32(out, uint32(b))
		out = v.h[b].Sum(out)
	}
	return out
}

// differingBuckets names the buckets in which two vectors differ (a
// digest differs, or one has the bucket and the other not). A vector that
// does not parse differs everywhere the other has a bucket.
func differingBuckets(a, b []byte) []int32 {
	pa, pb := parseVector(a), parseVector(b)
	var out []int32
	for k, d := range pa {
		if e, ok := pb[k]; !ok || !bytes.Equal(d, e) {
			out = append(out, k)
		}
	}
	for k := range pb {
		if _, ok := pa[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func parseVector(v []byte) map[int32][]byte {
	out := map[int32][]byte{}
	if len(v)%36 != 0 {
		return out
	}
	for i := 0; i+36 <= len(v); i += 36 {
		out[int32(binary.BigEndian.Uint32(v[i:]))] = v[i+4 : i+36]
	}
	return out
}

func sha256Of(s string) []byte {
	sum := sha256.Sum256([]byte(s))
	return sum[:]
}

func hexSHA(s *string) string {
	if s == nil {
		return ""
	}
	return hex.EncodeToString(sha256Of(*s))
}

func str(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func i16(v *int16) string {
	if v == nil {
		return ""
	}
	return strconv.FormatInt(int64(*v), 10)
}

func i32(v *int32) string {
	if v == nil {
		return ""
	}
	return strconv.FormatInt(int64(*v), 10)
}

func i64(v *int64) string {
	if v == nil {
		return ""
	}
	return strconv.FormatInt(*v, 10)
}
