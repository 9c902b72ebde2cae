// Package pgtemp starts throwaway PostgreSQL clusters from the PostgreSQL
// server binaries installed on the local machine.
//
// A cluster lives in its own directory under [os.TempDir] (named
// drainer-pg-*; see "Running as root" for an exception), listens on a free TCP port on 127.0.0.1 only, trusts every
// local connection and is owned by the process that started it. It is meant
// for tests, `drainer demo` and `drainer bench`: things that need a real
// server for a while and nothing afterwards.
//
//	c, err := pgtemp.Start(ctx, pgtemp.Options{Logger: logger})
//	if err != nil {
//		// No local binaries (errors.Is(err, pgtemp.ErrNoBinaries)) or the
//		// server failed to start: fall back to something else.
//	}
//	defer c.Stop()
//	pool, err := pgxpool.New(ctx, c.URL("postgres"))
//
// # Binaries
//
// Start looks for initdb, pg_ctl and postgres on PATH and then in the
// highest-versioned /usr/lib/postgresql/*/bin (the Debian and Ubuntu
// layout). When none are found it returns an error wrapping [ErrNoBinaries].
//
// # Running as root
//
// PostgreSQL refuses to run as root. When the calling process is root,
// pgtemp runs initdb, pg_ctl and the server as the unprivileged user
// "postgres" if it exists, else "nobody", and hands the cluster directory to
// that user. That user must be able to reach the cluster directory; if it
// cannot traverse [os.TempDir] (TMPDIR=/root/tmp, say), /tmp is used instead.
//
// # Leaked clusters
//
// Every cluster directory holds a marker file naming the process that owns
// it. A process killed before it could call [Cluster.Stop] (for example a
// test binary killed by -timeout) leaves a running server behind; the next
// call to [Start] on the same machine finds directories whose owner is gone,
// stops their servers and removes them.
package pgtemp
