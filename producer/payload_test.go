package producer

import (
	"errors"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func payloadIntent(step string, payload []byte) Intent {
	return Intent{Tuple: idemkey.Tuple{AgentRunID: "run-p", StepID: step, ToolName: "charge"}, Payload: payload}
}

// TestValidateRefusesWhatJSONBCannotStore: a payload that is valid JSON but
// that jsonb refuses (a \u0000 escape, an unpaired surrogate escape, bytes
// that are not UTF-8) is refused by Validate, and so by EnqueueTx and
// EnqueueBatchTx before the database, with an error naming the payload,
// what it holds and where; the database's own errors (22P05 "unsupported
// Unicode escape sequence", 22P02, 22021) named neither. Escapes jsonb
// takes stay accepted.
func TestValidateRefusesWhatJSONBCannotStore(t *testing.T) {
	pool := newPool(t)
	ctx := t.Context()
	for _, c := range []struct {
		payload string
		want    string
	}{
		{`{"note":"a\u0000b"}`, `payload contains a NUL character (\u0000) at byte offset 10`},
		{`{"lone":"\ud800"}`, `payload contains an unpaired UTF-16 surrogate (\ud800) at byte offset 9`},
		{`["\udc00\ud800"]`, `payload contains an unpaired UTF-16 surrogate (\udc00) at byte offset 2`},
		{`{"pair":"\ud83d x"}`, `payload contains an unpaired UTF-16 surrogate (\ud83d) at byte offset 9`},
		{"{\"bad\":\"\xff\"}", `payload is not valid UTF-8 (byte offset 8)`},
	} {
		in := payloadIntent("s", []byte(c.payload))
		if err := in.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%q) = %v, want an error containing %q", c.payload, err, c.want)
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, _, err := EnqueueTx(ctx, tx, in)
			return err
		})
		if _, isPg := errors.AsType[*pgconn.PgError](err); isPg || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("EnqueueTx(%q) = %v, want the producer's error containing %q", c.payload, err, c.want)
		}
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := EnqueueBatchTx(ctx, tx, []Intent{payloadIntent("ok", []byte(`{}`)), in})
			return err
		})
		if want := "intent 2: " + c.want; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("EnqueueBatchTx(…, %q) = %v, want an error containing %q", c.payload, err, want)
		}
	}
	// What jsonb takes: the text \u0000 (an escaped backslash), a surrogate
	// pair, a NUL-free control escape.
	for i, p := range []string{`{"t":"\\u0000"}`, `{"e":"\ud83d\ude00"}`, `["\u0001\\\ud83d\ude00"]`} {
		in := payloadIntent("ok-"+itoa(i), []byte(p))
		if err := in.Validate(); err != nil {
			t.Errorf("Validate(%s) = %v, want nil", p, err)
			continue
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, _, err := EnqueueTx(ctx, tx, in)
			return err
		})
		if err != nil {
			t.Errorf("EnqueueTx(%s) = %v", p, err)
		}
	}
}

// TestPayloadLimitMessagesSayWhatIsMeasured: the database measures a
// payload as jsonb renders it (a space after each comma and colon), and
// its refusal says so: a file of exactly 1,048,576 bytes ({"a":"xxx…"}) is
// 1,048,577 bytes rendered, an 800,001-byte compact array [1,1,…]
// 1,200,000. The producer's own pre-check names the limit.
func TestPayloadLimitMessagesSayWhatIsMeasured(t *testing.T) {
	pool := newPool(t)
	ctx := t.Context()
	const measured = "measured as jsonb renders it (payload::text, with a space after each comma and colon), not as sent"

	object := []byte(`{"a":"` + strings.Repeat("x", DefaultMaxPayloadBytes-8) + `"}`)
	array := []byte("[" + strings.Repeat("1,", 399_999) + "1]")
	if len(object) != DefaultMaxPayloadBytes || len(array) != 800_001 {
		t.Fatalf("test payloads are %d and %d bytes", len(object), len(array))
	}
	for _, c := range []struct {
		payload       []byte
		single, batch string
	}{
		{object, "drainer.enqueue: payload is 1048577 bytes, more than the limit of 1048576 (setting drainer.max_payload_bytes), " + measured,
			"drainer.enqueue_batch: intent 2: payload is 1048577 bytes, more than the limit of 1048576 (setting drainer.max_payload_bytes), " + measured},
		{array, "drainer.enqueue: payload is 1200000 bytes, more than the limit of 1048576 (setting drainer.max_payload_bytes), " + measured,
			"drainer.enqueue_batch: intent 2: payload is 1200000 bytes, more than the limit of 1048576 (setting drainer.max_payload_bytes), " + measured},
	} {
		in := payloadIntent("big", c.payload)
		if err := in.Validate(); err != nil {
			t.Fatalf("Validate of a %d-byte payload: %v", len(c.payload), err)
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, _, err := EnqueueTx(ctx, tx, in)
			return err
		})
		if pe, ok := errors.AsType[*pgconn.PgError](err); !ok || pe.Code != "54000" || pe.Message != c.single {
			t.Errorf("EnqueueTx of %d bytes: %v\nwant 54000 %s", len(c.payload), err, c.single)
		}
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := EnqueueBatchTx(ctx, tx, []Intent{payloadIntent("small", []byte(`{}`)), in})
			return err
		})
		if pe, ok := errors.AsType[*pgconn.PgError](err); !ok || pe.Code != "54000" || pe.Message != c.batch {
			t.Errorf("EnqueueBatchTx with %d bytes: %v\nwant 54000 %s", len(c.payload), err, c.batch)
		}
	}

	huge := payloadIntent("huge", []byte(`"`+strings.Repeat("x", 4*DefaultMaxPayloadBytes)+`"`))
	want := "payload is 4194306 bytes, more than 4 times the default limit of 1048576 bytes " +
		"(the database refuses a payload above the setting drainer.max_payload_bytes, default 1048576, measured as jsonb renders it)"
	if err := huge.Validate(); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Validate of a %d-byte payload = %v, want %q", len(huge.Payload), err, want)
	}
}

// TestDeepPayloadWithTrailingZero: a payload nested 5,000 deep holding a
// number with a trailing fractional zero is enqueued, by enqueue and
// enqueue_batch, and compares equal to the same value without the zero;
// the recursive canonical form before code revision 31 ran out of stack
// (54001 stack depth limit exceeded) where [[…[1]…]] was accepted.
func TestDeepPayloadWithTrailingZero(t *testing.T) {
	pool := newPool(t)
	ctx := t.Context()
	const depth = 5000
	nested := func(v string) []byte {
		return []byte(strings.Repeat("[", depth) + v + strings.Repeat("]", depth))
	}
	for _, batch := range []bool{false, true} {
		step := "single"
		if batch {
			step = "batch"
		}
		for i, c := range []struct {
			payload string
			created bool
		}{{"1.0", true}, {"1", false}, {"1.000", false}} {
			in := payloadIntent(step, nested(c.payload))
			var created bool
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if !batch {
					var err error
					_, created, err = EnqueueTx(ctx, tx, in)
					return err
				}
				res, err := EnqueueBatchTx(ctx, tx, []Intent{in})
				if err == nil {
					created = res[0].Created
				}
				return err
			})
			if err != nil {
				t.Fatalf("%s enqueue %d of a %d-deep [[…[%s]…]]: %v", step, i, depth, c.payload, err)
			}
			if created != c.created {
				t.Errorf("%s enqueue %d of a %d-deep [[…[%s]…]]: created %v, want %v", step, i, depth, c.payload, created, c.created)
			}
		}
	}
	// Another value at the same depth is another payload.
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, _, err := EnqueueTx(ctx, tx, payloadIntent("single", nested("1.5")))
		return err
	})
	if pe, ok := errors.AsType[*pgconn.PgError](err); !ok || pe.Code != "23505" {
		t.Errorf("a %d-deep [[…[1.5]…]] after [[…[1.0]…]]: %v, want 23505", depth, err)
	}
}
