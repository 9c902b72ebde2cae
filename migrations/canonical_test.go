package migrations_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/jackc/pgx/v5"
)

// recursiveCanonical is canonical_payload as code revisions up to 30
// defined it: the reference the payload hashes recorded since migration
// 015 were taken with.
const recursiveCanonical = `
CREATE FUNCTION old.canonical_payload(payload jsonb)
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE STRICT
AS $function$
    SELECT CASE jsonb_typeof(payload)
        WHEN 'number' THEN to_jsonb(trim_scale(payload::numeric))
        WHEN 'object' THEN coalesce((SELECT jsonb_object_agg(e.k, old.canonical_payload(e.v))
                                       FROM jsonb_each(payload) AS e(k, v)), '{}'::jsonb)
        WHEN 'array' THEN coalesce((SELECT jsonb_agg(old.canonical_payload(e.v) ORDER BY e.i)
                                      FROM jsonb_array_elements(payload) WITH ORDINALITY AS e(v, i)), '[]'::jsonb)
        ELSE payload END
$function$`

// randomJSON writes a random JSON value: numbers with and without trailing
// fractional zeros, exponents and signs, and strings and member names that
// look like numbers or hold quotes, backslashes and escapes.
func randomJSON(rng *rand.Rand, b *strings.Builder, depth int) {
	numbers := []string{"0", "-0", "0.0", "-0.0", "1", "1.0", "1.50", "10", "10.0", "100.000", "-3.10", "0.5050",
		"1e2", "1.0e2", "1.50E-3", "2.000e+1", "123456789012345678901234567890.1230", "0.000", "7.000001", "1.05"}
	stringsPool := []string{`""`, `"1.0"`, `"x.50"`, `"a\"1.0\"b"`, `"\\"`, `"\\\"2.00"`, `"\u00e9 1.0"`, `"\n3.0\t"`,
		`"😀 0.10"`, `"]1.0["`, `"\\u0030.0"`, `"true"`}
	k := rng.IntN(10)
	if depth > 4 {
		k = rng.IntN(6)
	}
	switch {
	case k < 3:
		b.WriteString(numbers[rng.IntN(len(numbers))])
	case k < 5:
		b.WriteString(stringsPool[rng.IntN(len(stringsPool))])
	case k < 6:
		b.WriteString([]string{"true", "false", "null"}[rng.IntN(3)])
	case k < 8:
		b.WriteByte('[')
		for i := range rng.IntN(4) {
			if i > 0 {
				b.WriteByte(',')
			}
			randomJSON(rng, b, depth+1)
		}
		b.WriteByte(']')
	default:
		b.WriteByte('{')
		for i := range rng.IntN(4) {
			if i > 0 {
				b.WriteByte(',')
			}
			if rng.IntN(2) == 0 {
				b.WriteString(stringsPool[rng.IntN(len(stringsPool))])
			} else {
				fmt.Fprintf(b, `"k%d"`, rng.IntN(5))
			}
			b.WriteByte(':')
			randomJSON(rng, b, depth+1)
		}
		b.WriteByte('}')
	}
}

// TestCanonicalPayloadEqualsTheRecursiveForm: canonical_payload, which
// rewrites jsonb's text in one pass since code revision 31, gives the same
// value as the recursive function before it on random payloads (so every
// payload hash recorded before is taken alike), and payload_text follows
// it; and it canonicalises payloads nested far deeper than the recursive
// form could (5,000 levels: stack depth limit exceeded, 54001).
func TestCanonicalPayloadEqualsTheRecursiveForm(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	if _, err := migrations.Migrate(ctx, conn, migrations.DefaultSchema, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE SCHEMA old; "+recursiveCanonical); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(31, 5))
	payloads := []string{`1.0`, `-0.0`, `"1.0"`, `[1.0, "2.0", {"3.0": 4.00}]`, `{"a": [10.0, 10.01, 10.10]}`}
	for range 3000 {
		var b strings.Builder
		randomJSON(rng, &b, 0)
		payloads = append(payloads, b.String())
	}
	rows, err := conn.Query(ctx, `
	    SELECT p, drainer.canonical_payload(p::jsonb)::text, old.canonical_payload(p::jsonb)::text,
	           drainer.payload_text(p::jsonb), old.canonical_payload(p::jsonb)::text = drainer.payload_text(p::jsonb)
	      FROM unnest($1::text[]) AS u(p)`, payloads)
	if err != nil {
		t.Fatal(err)
	}
	var p, got, want, text string
	var textSame bool
	differ, trimmed := 0, 0
	_, err = pgx.ForEachRow(rows, []any{&p, &got, &want, &text, &textSame}, func() error {
		if got != want || !textSame {
			differ++
			if differ <= 5 {
				t.Errorf("payload %s:\ncanonical_payload %s\nrecursive form    %s\npayload_text      %s", p, got, want, text)
			}
		}
		if got != p {
			trimmed++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if differ > 0 {
		t.Errorf("%d of %d payloads canonicalised differently", differ, len(payloads))
	}
	if trimmed < len(payloads)/4 {
		t.Errorf("only %d of %d payloads had a number to trim: the test must exercise the rewrite", trimmed, len(payloads))
	}

	const depth = 5000
	deep := strings.Repeat("[", depth) + "1.0" + strings.Repeat("]", depth)
	var canon string
	if err := conn.QueryRow(ctx, `SELECT drainer.canonical_payload($1::jsonb)::text`, deep).Scan(&canon); err != nil {
		t.Fatalf("canonical_payload of a %d-deep array: %v", depth, err)
	}
	if want := strings.Repeat("[", depth) + "1" + strings.Repeat("]", depth); canon != want {
		t.Errorf("canonical_payload of a %d-deep [[…[1.0]…]] is not [[…[1]…]]", depth)
	}
}
