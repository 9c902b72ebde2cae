package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/jackc/pgx/v5"
)

// TestBenchUsageErrors checks that bad flags exit 2 before anything starts;
// tooling/bench's tests run the measurements themselves.
func TestBenchUsageErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--workers", "0"}, "--workers (0)"},
		{[]string{"bench", "--replicas", "0"}, "--replicas (0)"},
		{[]string{"bench", "--replicas", "100"}, "replicas (100) must be between 1 and 64"},
		{[]string{"bench", "--schema", "Not-A-Schema"}, "invalid schema name"},
		{[]string{"bench", "extra"}, "unknown command"},
	} {
		var out, errb bytes.Buffer
		if code := execute(c.args, &out, &errb); code != exitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", c.args, code, exitUsage, errb.String())
		}
		if !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: stderr %q lacks %q", c.args, errb.String(), c.want)
		}
		if out.Len() != 0 {
			t.Errorf("%v: wrote %q to stdout", c.args, out.String())
		}
	}
}

// TestBenchInterruptDropsEverything runs the command in a process of its
// own against a test database, interrupts it (SIGINT) once it has created
// its schemas and is measuring (draining; just past River's run, with
// River's schema still there), and checks that it exits non-zero and leaves
// none of its schemas (drainer's, the ceiling's and insert's tables with
// it, River's) behind.
func TestBenchInterruptDropsEverything(t *testing.T) {
	url := dbtest.NewDatabase(t)
	for _, c := range []struct{ at, phases string }{{"drain 1/2", "drain"}, {"river (", "river,backlog"}} {
		t.Run(c.at, func(t *testing.T) {
			cmd := drainerCommand(t.Context(), "bench", "--quick", "--schema", "bx", "--workers", "8", "--phases", c.phases)
			cmd.Env = append(cmd.Env, "DRAINER_DATABASE_URL="+url)
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var progress strings.Builder
			sc := bufio.NewScanner(stderr)
			reached := false
			for sc.Scan() {
				progress.WriteString(sc.Text() + "\n")
				if strings.Contains(sc.Text(), c.at) {
					reached = true
					if err := cmd.Process.Signal(os.Interrupt); err != nil {
						t.Fatal(err)
					}
					break
				}
			}
			_, _ = io.Copy(&progress, stderr)
			err = cmd.Wait()
			if !reached {
				t.Fatalf("bench never reached %q: %v\n%s", c.at, err, progress.String())
			}
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != exitRuntime {
				t.Fatalf("interrupted bench: %v, want exit %d\n%s", err, exitRuntime, progress.String())
			}
			conn, err := pgx.Connect(t.Context(), url)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			var left []string
			rows, err := conn.Query(t.Context(), "SELECT nspname FROM pg_namespace WHERE nspname IN ('bx', 'bx_river')")
			if err != nil {
				t.Fatal(err)
			}
			left, err = pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			if len(left) > 0 {
				t.Errorf("interrupted bench left schemas %v\n%s", left, progress.String())
			}
			// Its connections are gone too (a backend may take a moment to
			// exit after its client closed the connection).
			var conns int
			for range 100 {
				if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
				    WHERE application_name LIKE 'drainer-bench%' AND datname = current_database()`).Scan(&conns); err != nil {
					t.Fatal(err)
				}
				if conns == 0 {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if conns != 0 {
				t.Errorf("%d bench connections left 5s after exit", conns)
			}
		})
	}
}
