package ops

import (
	"context"
	"fmt"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5"
)

// StatsWindows are the windows Stats reports settled rows over.
var StatsWindows = []time.Duration{time.Minute, 5 * time.Minute}

// Stats is the backlog of one database and how fast it drains, measured
// in one snapshot of the database.
type Stats struct {
	// Database names the database of a fleet's config (empty for one
	// given by its url).
	Database string `json:"database,omitempty"`
	// MeasuredAt is the database clock when the figures were read.
	MeasuredAt time.Time `json:"measured_at"`
	// RowsByStatus holds every status; the statuses of Estimated are
	// planner estimates (a queue past store.ExactCountLimit rows).
	RowsByStatus map[string]int64 `json:"rows_by_status"`
	Estimated    []outbox.Status  `json:"estimated,omitempty"`
	// RowsByTool counts the rows that hold work (pending, in_flight,
	// outcome_unknown, compensation_failed) by tool and status.
	RowsByTool []store.ToolCount `json:"rows_by_tool"`
	// OldestPendingAgeSeconds is now() - min(next_attempt_at) over the due
	// pending rows, 0 when none: how late the drain is.
	OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
	// OldestPendingByTool is the same per tool with due pending rows.
	OldestPendingByTool []store.ToolAge `json:"oldest_pending_by_tool"`
	// Settled counts the rows settled (last changed into a terminal or
	// parked status) in each of StatsWindows.
	Settled []Settled `json:"settled"`
	// Error is why a database of a fleet could not be measured.
	Error string `json:"error,omitempty"`
}

// Settled is the rows settled in the last WindowSeconds, by status, and
// their rate.
type Settled struct {
	WindowSeconds int64            `json:"window_seconds"`
	RowsByStatus  map[string]int64 `json:"rows_by_status"`
	Rows          int64            `json:"rows"`
	RowsPerSecond float64          `json:"rows_per_second"`
}

// Stats measures the backlog: rows by status (as the daemons' snapshot
// counts them, but now), the work by tool, the oldest due pending row
// overall and per tool, and the rows settled in each of StatsWindows.
func (c *Client) Stats(ctx context.Context) (*Stats, error) {
	st := &Stats{RowsByStatus: map[string]int64{}}
	err := c.readOnly(ctx, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, "SELECT now()").Scan(&st.MeasuredAt); err != nil {
			return err
		}
		counts, estimated, err := c.st.CountStatuses(ctx, tx)
		if err != nil {
			return err
		}
		for _, s := range outbox.Statuses {
			st.RowsByStatus[string(s)] = counts[s]
		}
		st.Estimated = estimated
		if st.RowsByTool, err = c.st.CountsByTool(ctx, tx); err != nil {
			return err
		}
		if st.OldestPendingByTool, err = c.st.OldestPendingByTool(ctx, tx); err != nil {
			return err
		}
		for _, t := range st.OldestPendingByTool {
			st.OldestPendingAgeSeconds = max(st.OldestPendingAgeSeconds, t.AgeSeconds)
		}
		for _, w := range StatsWindows {
			byStatus, err := c.st.SettledSince(ctx, tx, w)
			if err != nil {
				return err
			}
			s := Settled{WindowSeconds: int64(w / time.Second), RowsByStatus: map[string]int64{}}
			for _, status := range store.SettledStatuses {
				s.RowsByStatus[string(status)] = byStatus[status]
				s.Rows += byStatus[status]
			}
			s.RowsPerSecond = float64(s.Rows) / w.Seconds()
			st.Settled = append(st.Settled, s)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	st.MeasuredAt = st.MeasuredAt.UTC()
	return st, nil
}
