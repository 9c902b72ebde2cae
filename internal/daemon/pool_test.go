package daemon

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// TestPoolSizeFromURL: a database URL's pool_max_conns sizes the pool; the
// daemon sized it from the workers whatever the URL said (67 connections
// with the defaults, enough to exhaust a small shared server).
func TestPoolSizeFromURL(t *testing.T) {
	for _, tc := range []struct {
		url     string
		workers int
		want    int32
	}{
		{"postgres://u@db:5432/app?pool_max_conns=5", 256, 5},
		{"host=db dbname=app pool_max_conns=7", 256, 7},
		{"postgres://u@db:5432/app", 256, 64},
		{"postgres://u@db:5432/app", 16, 12},
	} {
		pc, err := pgxpool.ParseConfig(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := poolMaxConns(tc.url, pc.MaxConns, tc.workers); got != tc.want {
			t.Errorf("%s with %d workers: pool of %d, want %d", tc.url, tc.workers, got, tc.want)
		}
	}
}
