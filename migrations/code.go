package migrations

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"
)

// code holds the current definition of every function, view and trigger of
// the schema, one file each (code/functions, code/views, code/triggers),
// and code/install.sql, which names them all: a tern code package. The
// numbered migrations keep tables, indexes and data, and the history.
//
//go:embed code
var code embed.FS

// CodeRevision numbers the definitions in code/. Bump it with every change
// there (TestCodeRevisionNamesTheFiles fails until you do): a daemon
// installs its definitions over an older revision only, so an old binary
// running `drainer migrate` during a rolling upgrade never puts back the
// definitions a newer one installed.
const CodeRevision = 35

// Code returns the code package rendered for schema, and its SHA-256.
func Code(schema string) (sql, sum string, err error) {
	sub, err := fs.Sub(code, "code")
	if err != nil {
		return "", "", err
	}
	pkg, err := migrate.LoadCodePackage(sub)
	if err != nil {
		return "", "", fmt.Errorf("load code package: %w", err)
	}
	sql, err = pkg.Eval(map[string]any{"schema": schema})
	if err != nil {
		return "", "", fmt.Errorf("render code package: %w", err)
	}
	h := sha256.Sum256([]byte(sql))
	return sql, hex.EncodeToString(h[:]), nil
}

// installCode installs the code package into schema, in one transaction
// under the schema's migration lock, unless the schema already holds this
// revision with the same content, or a newer revision. It reports whether
// it installed. Once the migration lock is held, each statement waits at
// most lockTimeout for a table lock (its CREATE TRIGGER … ON queue waits
// for every open transaction that wrote the queue): the transaction fails
// with SQLSTATE 55P03 instead, and MigrateWith retries it.
func installCode(ctx context.Context, conn *pgx.Conn, schema string, lockTimeout time.Duration, log *slog.Logger) (bool, error) {
	sql, sum, err := Code(schema)
	if err != nil {
		return false, err
	}
	installed := false
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		installed, err = installCodeTx(ctx, tx, schema, sql, sum, lockTimeout, log)
		return err
	})
	return installed, err
}

// installCodeTx is installCode's work inside tx (sql and sum from Code).
func installCodeTx(ctx context.Context, tx pgx.Tx, schema, sql, sum string, lockTimeout time.Duration, log *slog.Logger) (bool, error) {
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey(schema)); err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, lockTimeoutSQL(lockTimeout)); err != nil {
		return false, err
	}
	var revText, have string
	err := tx.QueryRow(ctx, `SELECT coalesce(max(value) FILTER (WHERE name = 'code_revision'), '0'),
		        coalesce(max(value) FILTER (WHERE name = 'code_sha256'), '')
		   FROM `+schema+`.schema_meta`).Scan(&revText, &have)
	if err != nil {
		return false, fmt.Errorf("read code revision: %w", err)
	}
	rev, _ := strconv.Atoi(revText)
	if rev > CodeRevision || (rev == CodeRevision && have == sum) {
		return false, nil
	}
	log.Info("installing functions, views and triggers", "schema", schema, "revision", CodeRevision, "was", rev)
	if _, err := tx.Exec(ctx, sql); err != nil {
		return false, fmt.Errorf("install code revision %d: %w", CodeRevision, err)
	}
	_, err = tx.Exec(ctx, `INSERT INTO `+schema+`.schema_meta (name, value)
	        VALUES ('code_revision', $1), ('code_sha256', $2)
	        ON CONFLICT (name) DO UPDATE SET value = excluded.value`, strconv.Itoa(CodeRevision), sum)
	return err == nil, err
}

// Definition returns the current definition of one object of code/ (for
// example "functions/complete_rows.sql") for schema, as migrate installs
// it. drainer bench uses it to put a variant in its scratch schema and to
// put the definition back.
func Definition(schema, name string) (string, error) {
	if err := ValidateSchema(schema); err != nil {
		return "", err
	}
	b, err := code.ReadFile("code/" + name)
	if err != nil {
		return "", fmt.Errorf("definition %s: %w", name, err)
	}
	return strings.ReplaceAll(string(b), "{{.schema}}", schema), nil
}
