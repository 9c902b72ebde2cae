package pgreach

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestUnreachable: a server that could not be reached, or answered that it
// cannot take a connection yet, is waited for; one that answered and
// refused is not.
func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	_, refused := pgconn.Connect(t.Context(), "postgres://u@"+addr+"/db?sslmode=disable&connect_timeout=5")
	if refused == nil {
		t.Fatalf("connected to %s, where nothing listens", addr)
	}
	pgErr := func(code string) error { return fmt.Errorf("look up table: %w", &pgconn.PgError{Code: code}) }
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", refused, true},
		{"deadline", fmt.Errorf("ping: %w", context.DeadlineExceeded), true},
		{"starting up", pgErr("57P03"), true},
		{"too many connections", pgErr("53300"), true},
		{"connection failure", pgErr("08006"), true},
		{"password refused", pgErr("28P01"), false},
		{"no such database", pgErr("3D000"), false},
		{"undefined table", pgErr("42P01"), false},
		{"TLS alert", &net.OpError{Op: "remote error", Err: tls.AlertError(48)}, false},
		{"other", errors.New("river's tables are missing"), false},
	} {
		if got := Unreachable(tt.err); got != tt.want {
			t.Errorf("%s: Unreachable(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}
