package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/drainer-io/drainer/outbox"
	"github.com/jackc/pgx/v5"
)

// The statements of the MCP gateway's calls (docs/reference.md §13): the
// completion's announcement of a settled row with its record, and the
// gateway's reading of a call's state.

// SettleChannel is the LISTEN/NOTIFY channel on which a completion
// announces the key of each row of an announcing route that settled
// (Completion.Announce); the MCP gateway waits on it.
func (s *Store) SettleChannel() string { return s.schema + ".settled" }

// settledHere selects, of the completions that announce ($1 seqs, $2
// records or null), those whose row this transaction settled, with their
// key. A completion fenced out (its row claimed again, perhaps settled by
// another replica since) wrote nothing: the row's version is not this
// transaction's (xmin), so it neither announces nor touches a record.
const settledHere = `SELECT i.key, c.rec
      FROM unnest($1::bigint[], $2::text[]) AS c(seq, rec)
      JOIN {s}.queue q ON q.seq = c.seq
      JOIN {s}.intents i ON i.seq = c.seq
     WHERE q.status NOT IN ({StatusPending}, {StatusInFlight})
       AND q.xmin = pg_current_xact_id()::xid`

// announceSQL, in a completion's transaction after its rows were written:
// the record of each row this transaction settled replaces the one kept
// before (deleted when the row's completion has none, inserted or
// overwritten when it has one), so a replay answers what the row says now:
// a row settled, requeued by an operator and settled again answers the
// second attempt's result, or none when that attempt got none. It then
// announces each key on $3 at commit. One statement: the rows settled here
// are found once.
const announceSQL = `WITH settled AS (` + settledHere + `
), unrecorded AS (
    DELETE FROM {s}.call_records r
     USING settled d
     WHERE r.key = d.key AND d.rec IS NULL
), kept AS (
    INSERT INTO {s}.call_records AS r (key, result)
    SELECT key, rec::json FROM settled WHERE rec IS NOT NULL
    ON CONFLICT (key) DO UPDATE SET result = excluded.result, recorded_at = excluded.recorded_at
)
SELECT count(pg_notify($3, key)) FROM settled`

// RecordKept reports whether call_records keeps rec as a settled call's
// record: a non-empty, valid JSON document (kept as it is: the column is
// json). The news of a settled call (Settle) carries the same one.
func RecordKept(rec json.RawMessage) bool { return len(rec) > 0 && json.Valid(rec) }

// queueAnnounce queues announceSQL for the completions of cs that
// announce; it reports whether it queued it.
func (s *Store) queueAnnounce(b *pgx.Batch, cs []Completion) bool {
	var seqs []int64
	var recs []*string
	for _, c := range cs {
		if !c.Announce {
			continue
		}
		seqs = append(seqs, c.Seq)
		var rec *string
		if RecordKept(c.Record) {
			r := string(c.Record)
			rec = &r
		}
		recs = append(recs, rec)
	}
	if len(seqs) == 0 {
		return false
	}
	b.Queue(s.sql(announceSQL), seqs, recs, s.SettleChannel())
	return true
}

// Call is what the gateway answers about a recorded call.
type Call struct {
	Key       string
	Status    outbox.Status
	Response  json.RawMessage // the row's response (docs/reference.md §2)
	LastError string
	// Record is the tool result kept when the row settled (nil: none,
	// e.g. the call failed without an answer, or left unread: RecordBytes).
	Record json.RawMessage
	// RecordBytes is the size of a record Call left unread, over the
	// limit it was given (0: none left unread).
	RecordBytes int64
	// Traceparent is the row's trace context ("" when it has none).
	Traceparent string
}

// Settle is the news of a call's row settled by a completion of this
// process (drainer.Config.Settled): its key, and, when Known, the state
// the completion wrote. Known only for a success with a tool result: the
// Record is then the one kept in call_records, byte for byte; Response is
// as the completion wrote it (the row keeps it as jsonb, so a read may
// give it other spacing and key order).
type Settle struct {
	Key   string
	Known bool
	Call  Call
}

// Settled reports whether the call's row is terminal or parked.
func (c Call) Settled() bool { return c.Status.Terminal() || c.Status.Parked() }

// ErrNoCall: the key has no row (never enqueued, or pruned since).
var ErrNoCall = errors.New("no row for the key")

// callSQL reads a call's row with its record when the record is within
// $2 bytes, and the record's size (its length is read without the record:
// a json value is text).
const callSQL = `SELECT o.status, o.response, coalesce(o.last_error, ''),
       CASE WHEN octet_length(r.result::text) <= $2 THEN r.result END,
       CASE WHEN octet_length(r.result::text) > $2 THEN octet_length(r.result::text) ELSE 0 END,
       coalesce(o.traceparent, '')
  FROM {s}.outbox o
  LEFT JOIN {s}.call_records r ON r.key = o.key
 WHERE o.key = $1`

// AllRecords is Call's limit that reads every record.
const AllRecords = math.MaxInt32

// Call reads the state of the row of key, with its record when the record
// is within limit bytes (AllRecords: whatever its size), its size
// otherwise (Call.RecordBytes); ErrNoCall when there is no row.
func (s *Store) Call(ctx context.Context, db DB, key string, limit int) (Call, error) {
	c := Call{Key: key}
	var status string
	var resp, rec []byte
	err := db.QueryRow(ctx, s.sql(callSQL), key, limit).Scan(&status, &resp, &c.LastError, &rec, &c.RecordBytes, &c.Traceparent)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, ErrNoCall
	}
	if err != nil {
		return c, fmt.Errorf("read call %s: %w", key, err)
	}
	c.Status, c.Response, c.Record = outbox.Status(status), resp, rec
	return c, nil
}
