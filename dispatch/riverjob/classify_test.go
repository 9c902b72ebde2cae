package riverjob

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/drainer-io/drainer/dispatch"
)

func TestClassifySQLState(t *testing.T) {
	tests := map[string]dispatch.Outcome{
		"40001": dispatch.Retry, "40P01": dispatch.Retry, "55P03": dispatch.Retry, "57014": dispatch.Retry,
		"53300": dispatch.Retry, "53100": dispatch.Retry, "58030": dispatch.Retry, "XX000": dispatch.Retry,
		"08006": dispatch.Retry, "08001": dispatch.Retry, "57P01": dispatch.Retry, "57P03": dispatch.Retry, "25006": dispatch.Retry,
		"28P01": dispatch.Auth, "28000": dispatch.Auth, "42501": dispatch.Auth,
		"42P01": dispatch.Terminal, "42703": dispatch.Terminal, "23514": dispatch.Terminal, "23505": dispatch.Terminal,
		"22P02": dispatch.Terminal, "P0001": dispatch.Terminal, "": dispatch.Terminal,
	}
	for code, want := range tests {
		if got := classifySQLState(code); got.Outcome != want || got.Reason == "" {
			t.Errorf("SQLSTATE %q: %s (reason %q), want %s", code, got.Outcome, got.Reason, want)
		}
	}
}

// timeoutError is a net.Error that timed out.
type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

var _ net.Error = timeoutError{}

func TestClassifyPhases(t *testing.T) {
	deadline, cancel := context.WithTimeout(context.Background(), 0)
	defer cancel()
	cancelled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	live := context.Background()
	pgErr := &pgconn.PgError{Code: "40001", Message: "could not serialize access", Detail: "Failing row contains (secret)"}
	tests := []struct {
		name    string
		ctx     context.Context
		p       phase
		err     error
		outcome dispatch.Outcome
		notSent bool
		reason  string
	}{
		{"begin refused", live, phaseBegin, &net.OpError{Op: "dial", Err: errors.New("connection refused")}, dispatch.Retry, true, dispatch.ReasonConnect},
		{"begin cancelled", cancelled, phaseBegin, context.Canceled, dispatch.Retry, true, dispatch.ReasonCancelled},
		{"insert deadline", deadline, phaseInsert, errors.New("timeout: context deadline exceeded"), dispatch.Retry, true, dispatch.ReasonTimeout},
		{"insert conn lost", live, phaseInsert, io.ErrUnexpectedEOF, dispatch.Retry, true, dispatch.ReasonConnection},
		{"insert server error", live, phaseInsert, pgErr, dispatch.Retry, false, ReasonDBTransient},
		{"commit server error", live, phaseCommit, pgErr, dispatch.Retry, false, ReasonDBTransient},
		{"commit deadline", deadline, phaseCommit, timeoutError{}, dispatch.Ambiguous, false, ReasonCommitUnknown},
		{"commit conn lost", live, phaseCommit, io.ErrUnexpectedEOF, dispatch.Ambiguous, false, ReasonCommitUnknown},
		{"commit cancelled", cancelled, phaseCommit, context.Canceled, dispatch.Ambiguous, false, dispatch.ReasonCancelled},
	}
	for _, tt := range tests {
		r := classify(tt.ctx, tt.p, tt.err)
		// An error the server answered is Refused: the attempt counts.
		if wantRefused := errors.Is(tt.err, pgErr); r.Refused != wantRefused {
			t.Errorf("%s: Refused=%v, want %v", tt.name, r.Refused, wantRefused)
		}
		if r.Outcome != tt.outcome || r.NotSent != tt.notSent || r.Reason != tt.reason || r.Err == nil {
			t.Errorf("%s: %s NotSent=%v reason %q err %v; want %s NotSent=%v reason %q",
				tt.name, r.Outcome, r.NotSent, r.Reason, r.Err, tt.outcome, tt.notSent, tt.reason)
		}
		if r.Err != nil && strings.Contains(r.Err.Error(), "secret") {
			t.Errorf("%s: error quotes the detail: %v", tt.name, r.Err)
		}
	}
}

func TestSafeMessage(t *testing.T) {
	tests := []struct {
		err  pgconn.PgError
		want string
	}{
		{pgconn.PgError{Code: "42P01", Message: `relation "river_job" does not exist`}, `relation "river_job" does not exist`},
		{pgconn.PgError{Code: "22P02", Message: `invalid input syntax for type json: "secret"`}, ""},
		{pgconn.PgError{Code: "P0001", Message: "raised with secret"}, ""},
		{pgconn.PgError{Code: "23514", Message: "new row violates", ConstraintName: "positive_amount", Detail: "Failing row contains (secret)"}, "violates constraint positive_amount"},
		{pgconn.PgError{Code: "23514", Message: "raised with secret"}, ""},
		{pgconn.PgError{Code: "40001", Message: strings.Repeat("x", 300)}, strings.Repeat("x", 200) + "…"},
	}
	for _, tt := range tests {
		if got := safeMessage(&tt.err); got != tt.want {
			t.Errorf("safeMessage(%s %q) = %q, want %q", tt.err.Code, tt.err.Message, got, tt.want)
		}
	}
}
