package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Witness is a forward row known to have succeeded: its effect exists.
type Witness struct {
	Key                                         string
	AgentRunID, StepID, ToolName, BusinessScope string
}

// LastSucceeded returns a recent succeeded forward row of tool, or nil when
// it has none (a detect probe proves itself on it).
func (s *Store) LastSucceeded(ctx context.Context, db DB, tool string) (*Witness, error) {
	var w Witness
	err := db.QueryRow(ctx, s.sql(`SELECT key, agent_run_id, step_id, tool_name, business_scope
	      FROM {s}.outbox WHERE status = {StatusSucceeded} AND tool_name = $1 AND kind = {KindForward}
	     ORDER BY updated_at DESC LIMIT 1`), tool).
		Scan(&w.Key, &w.AgentRunID, &w.StepID, &w.ToolName, &w.BusinessScope)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("a succeeded row of %s: %w", tool, err)
	}
	return &w, nil
}
