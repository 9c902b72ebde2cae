package dispatch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/tooling/testkit"
)

type probed struct {
	closed, background bool
}

func (*probed) Dispatch(context.Context, *Message) Result { return Result{} }

func (p *probed) Close(context.Context) error {
	p.closed = true
	return nil
}

// TestStartProbed: a reachable provider starts the adapter; an unreachable
// one starts it too, logged, with the rest in the background; any other
// probe error closes it and fails the start; a failed build fails it with
// nothing to close.
func TestStartProbed(t *testing.T) {
	down := MarkUnavailable(errors.New("dial tcp: connection refused"))
	refused := errors.New("SASL authentication failed")
	built := errors.New("bad config")
	for _, tt := range []struct {
		name                    string
		build, probe            error
		wantErr                 error
		wantAdapter, wantClosed bool
		wantBackground, wantLog bool
	}{
		{name: "reachable", wantAdapter: true},
		{name: "unreachable", probe: fmt.Errorf("probe: %w", down), wantAdapter: true, wantBackground: true, wantLog: true},
		{name: "refused", probe: refused, wantErr: refused, wantClosed: true},
		{name: "not built", build: built, wantErr: built},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			ad := &probed{}
			start := StartProbed(log, "x: unreachable at startup",
				func() (*probed, error) { return ad, tt.build },
				func(context.Context, *probed) error { return tt.probe },
				func(p *probed) { p.background = true })
			got, err := start(context.Background())
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if (got != nil) != tt.wantAdapter {
				t.Errorf("adapter = %v, want one: %v", got, tt.wantAdapter)
			}
			if ad.closed != tt.wantClosed || ad.background != tt.wantBackground {
				t.Errorf("closed %v, background %v; want %v, %v", ad.closed, ad.background, tt.wantClosed, tt.wantBackground)
			}
			if logged := strings.Contains(logs.String(), "x: unreachable at startup") && strings.Contains(logs.String(), "connection refused"); logged != tt.wantLog {
				t.Errorf("logged %v, want %v: %q", logged, tt.wantLog, logs.String())
			}
		})
	}
	t.Run("no logger", func(t *testing.T) {
		ad := &probed{}
		start := StartProbed(nil, "x", func() (*probed, error) { return ad, nil },
			func(context.Context, *probed) error { return down }, func(p *probed) { p.background = true })
		if got, err := start(context.Background()); err != nil || got == nil || !ad.background {
			t.Errorf("start = %v, %v (background %v), want the adapter started in the background", got, err, ad.background)
		}
	})
}

// closerAdapter is an adapter closed by Close() error, as the database
// adapters are.
type closerAdapter struct{ closed bool }

func (*closerAdapter) Dispatch(context.Context, *Message) Result { return Result{} }

func (c *closerAdapter) Close() error {
	c.closed = true
	return nil
}

// TestStartProbedClosesACloser: a refused probe closes an adapter whose
// Close takes no context too.
func TestStartProbedClosesACloser(t *testing.T) {
	ad := &closerAdapter{}
	refused := errors.New("table x does not exist")
	start := StartProbed(nil, "x", func() (*closerAdapter, error) { return ad, nil },
		func(context.Context, *closerAdapter) error { return refused }, func(*closerAdapter) {})
	if got, err := start(context.Background()); !errors.Is(err, refused) || got != nil || !ad.closed {
		t.Errorf("start = %v, %v (closed %v); want the refusal and the adapter closed", got, err, ad.closed)
	}
}

// TestBackground: a background start waits until its probe succeeds,
// logging an unreachable provider as a warning and a refusal as an error,
// then drains; Stop ends one that never succeeds; the zero value is not
// waiting; NotReady holds a row back without an attempt.
func TestBackground(t *testing.T) {
	var zero Background
	zero.Stop()
	if zero.Waiting() {
		t.Error("the zero Background waits")
	}

	var logs testkit.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil)).With("adapter", "ledger")
	answers := make(chan error, 3)
	answers <- MarkUnavailable(errors.New("dial tcp: connection refused"))
	answers <- errors.New("table ledger does not exist")
	answers <- nil
	var b Background
	b.Start(log, "postgres", "database", func(context.Context) error { return <-answers })
	if !b.Waiting() {
		t.Fatal("not waiting right after Start")
	}
	testkit.WaitFor(t, time.Minute, "the background start to succeed", func() (bool, string) { return !b.Waiting(), logs.String() })
	b.Stop()
	for _, want := range []string{
		`level=WARN msg="postgres: database unreachable; connecting in the background (its rows wait, other adapters drain)" adapter=ledger`,
		`level=ERROR msg="postgres: the database refused the start; retrying in the background (its rows wait)" adapter=ledger`,
		`level=INFO msg="postgres: the database answered; the adapter's rows drain now" adapter=ledger tries=3`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("no %q in the log:\n%s", want, logs.String())
		}
	}

	var never Background
	never.Start(nil, "nats", "server", func(context.Context) error { return MarkUnavailable(errors.New("no servers")) })
	never.Stop()
	if !never.Waiting() {
		t.Error("a background start that never succeeded stopped waiting")
	}

	r := NotReady(errors.New("not sent"))
	if r.Outcome != Retry || !r.NotSent || r.Reason != ReasonNotReady || r.RetryAfter <= 0 {
		t.Errorf("NotReady = %+v, want a retry, not sent, not_ready, with a floor", r)
	}
}
