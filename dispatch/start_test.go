package dispatch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
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
