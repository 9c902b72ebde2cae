package store_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
)

// TestSessionThroughAPooler: drainer's own connections through a pooler
// that refuses the settings sent at startup (PgBouncer as shipped) or
// drops them (ignore_startup_parameters) are refused at once, naming the
// pooler and the way out; through nothing, they connect with their
// settings held.
func TestSessionThroughAPooler(t *testing.T) {
	t.Parallel()
	dsn := dbtest.NewDatabase(t)
	ctx := context.Background()
	connect := func(t *testing.T, dsn string) (*pgx.Conn, error) {
		t.Helper()
		cc, err := pgx.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		store.SessionDefaults(cc)
		return pgx.ConnectConfig(ctx, cc)
	}

	conn, err := connect(t, dsn)
	if err != nil {
		t.Fatalf("direct: %v", err)
	}
	var jit, timeout string
	if err := conn.QueryRow(ctx, `SELECT current_setting('jit'), current_setting('statement_timeout')`).Scan(&jit, &timeout); err != nil || jit != "off" || timeout != "0" {
		t.Fatalf("direct: jit %q statement_timeout %q (%v)", jit, timeout, err)
	}
	_ = conn.Close(ctx)

	// A database whose own default differs shows a pooler that drops
	// what drainer asked.
	db := strings.TrimPrefix(must(url.Parse(dsn)).Path, "/")
	admin := must(pgx.Connect(ctx, dsn))
	if _, err := admin.Exec(ctx, `ALTER DATABASE "`+db+`" SET statement_timeout = '50ms'`); err != nil {
		t.Fatal(err)
	}
	_ = admin.Close(ctx)

	refusing := startPooler(t, dsn, true)
	_, err = connect(t, refusing)
	if err == nil || !strings.Contains(store.PoolerHint(err).Error(), "Connection poolers") {
		t.Fatalf("through a pooler refusing startup parameters: %v", store.PoolerHint(err))
	}

	dropping := startPooler(t, dsn, false)
	_, err = connect(t, dropping)
	if se, ok := errors.AsType[*store.SessionError](err); !ok || !strings.Contains(se.Error(), "statement_timeout is 50, asked 0") ||
		!strings.Contains(se.Error(), "jit is on, asked off") {
		t.Fatalf("through a pooler dropping startup parameters: %v", err)
	}
	// A connection that asks for none of drainer's settings (a producer's)
	// goes through either.
	for _, through := range []string{refusing, dropping} {
		c, err := pgx.Connect(ctx, through)
		if err != nil {
			t.Fatalf("a producer's connection through %s: %v", through, err)
		}
		_ = c.Close(ctx)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// startPooler starts a stand-in for PgBouncer in front of the database of
// dsn and returns the dsn through it. It forwards user, database and
// application_name; any other startup parameter it refuses with 08P01,
// as PgBouncer does (refuse), or leaves out, as PgBouncer told to ignore
// them does.
func startPooler(t *testing.T, dsn string, refuse bool) string {
	t.Helper()
	u := must(url.Parse(dsn))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go pool(c, u.Host, refuse)
		}
	}()
	through := *u
	through.Host = ln.Addr().String()
	return through.String()
}

func pool(client net.Conn, server string, refuse bool) {
	defer client.Close()
	be := pgproto3.NewBackend(client, client)
	msg, err := be.ReceiveStartupMessage()
	if err != nil {
		return
	}
	sm, ok := msg.(*pgproto3.StartupMessage)
	if !ok {
		return
	}
	kept := map[string]string{}
	for name, value := range sm.Parameters {
		switch name {
		case "user", "database", "application_name":
			kept[name] = value
		default:
			if refuse {
				be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", Code: "08P01", Message: "unsupported startup parameter: " + name})
				_ = be.Flush()
				return
			}
		}
	}
	up, err := net.Dial("tcp", server)
	if err != nil {
		return
	}
	defer up.Close()
	fe := pgproto3.NewFrontend(up, up)
	fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber, Parameters: kept})
	if err := fe.Flush(); err != nil {
		return
	}
	go func() { _, _ = io.Copy(up, client) }()
	_, _ = io.Copy(client, up)
}
