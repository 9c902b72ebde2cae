package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Poolers: drainer's own sessions (run, migrate) need a session of
// PostgreSQL's to themselves. They listen for notifications, take session
// advisory locks (the wake gate, retention, the migrator's), and start with
// the settings of SessionDefaults. A pooler in transaction mode hands the
// server session to other clients between transactions: notifications are
// lost, locks stay behind on a session another client then holds, and a
// SET applies to strangers. PgBouncer refuses the settings sent at startup
// (08P01, "unsupported startup parameter"), and once told to ignore them
// (ignore_startup_parameters) drops them silently. Both are caught here
// and named, so that such a setup fails at once with the way out, rather
// than retrying for ever as "database unreachable" or draining with
// another session's settings. Producers may use any pooler: an enqueue is
// one statement of the producer's own transaction (docs/operating.md,
// "Connection poolers").

// PoolerHint returns err, explained when it is a pooler's refusal of the
// settings drainer sends when it connects; other errors are returned as
// they are.
func PoolerHint(err error) error {
	if err == nil {
		return nil
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "08P01" && strings.Contains(pe.Message, "unsupported startup parameter") {
		return fmt.Errorf("%w: a connection pooler (PgBouncer, say) answers for PostgreSQL and refuses the session settings drainer sends when it connects; "+
			"drainer run and drainer migrate need a connection to PostgreSQL itself (producers may keep the pooler): see docs/operating.md, \"Connection poolers\"", err)
	}
	return err
}

// SessionError is a connection whose session does not hold the settings
// it was opened with: something between drainer and PostgreSQL dropped
// them (a pooler's ignore_startup_parameters).
type SessionError struct {
	// Differ lists each setting as the session has it and as asked.
	Differ []string
}

func (e *SessionError) Error() string {
	return fmt.Sprintf("the database session does not hold the settings drainer connected with (%s): a connection pooler between drainer and PostgreSQL "+
		"dropped them (PgBouncer's ignore_startup_parameters), and would share this session's notifications, advisory locks and settings with other clients; "+
		"drainer run and drainer migrate need a connection to PostgreSQL itself (producers may keep the pooler): see docs/operating.md, \"Connection poolers\"",
		strings.Join(e.Differ, "; "))
}

// checkSession returns an AfterConnect that refuses a connection whose
// session does not hold want (name → value in the setting's base unit, as
// pg_settings.setting gives it), then runs next, if any.
func checkSession(want map[string]string, next pgconn.AfterConnectFunc) pgconn.AfterConnectFunc {
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	sort.Strings(names)
	query := `SELECT name, setting FROM pg_catalog.pg_settings WHERE name IN ('` + strings.Join(names, "', '") + `') ORDER BY name`
	return func(ctx context.Context, conn *pgconn.PgConn) error {
		res := conn.ExecParams(ctx, query, nil, nil, nil, nil).Read()
		if res.Err != nil {
			return fmt.Errorf("read the session's settings: %w", res.Err)
		}
		var differ []string
		for _, row := range res.Rows {
			name, got := string(row[0]), string(row[1])
			if got != want[name] {
				differ = append(differ, fmt.Sprintf("%s is %s, asked %s", name, got, want[name]))
			}
		}
		if len(differ) > 0 {
			return &SessionError{Differ: differ}
		}
		if next != nil {
			return next(ctx, conn)
		}
		return nil
	}
}
