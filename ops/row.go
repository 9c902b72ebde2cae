package ops

import (
	"encoding/json"
	"time"
)

// Row is one outbox row. JSON field names are the column names (CONTRACT
// §2), plus the extras first_attempt_at, last_problem, forward_key, note,
// leased_by and lease_expires_at.
type Row struct {
	Key            string          `json:"key" db:"key"`
	Seq            int64           `json:"seq" db:"seq"`
	AgentRunID     string          `json:"agent_run_id" db:"agent_run_id"`
	StepID         string          `json:"step_id" db:"step_id"`
	ToolName       string          `json:"tool_name" db:"tool_name"`
	BusinessScope  string          `json:"business_scope" db:"business_scope"`
	Kind           string          `json:"kind" db:"kind"`
	Payload        json.RawMessage `json:"payload" db:"payload"`
	Status         string          `json:"status" db:"status"`
	Attempts       int             `json:"attempts" db:"attempts"`
	NextAttemptAt  time.Time       `json:"next_attempt_at" db:"next_attempt_at"`
	FirstAttemptAt *time.Time      `json:"first_attempt_at" db:"first_attempt_at"`
	LastError      *string         `json:"last_error" db:"last_error"`
	LastProblem    json.RawMessage `json:"last_problem" db:"last_problem"`
	Response       json.RawMessage `json:"response" db:"response"`
	ResponseStatus *int            `json:"response_status" db:"response_status"`
	ForwardKey     *string         `json:"forward_key" db:"forward_key"`
	Note           *string         `json:"note" db:"note"`
	LeasedBy       *string         `json:"leased_by" db:"leased_by"`
	LeaseExpiresAt *time.Time      `json:"lease_expires_at" db:"lease_expires_at"`
	CreatedAt      time.Time       `json:"created_at" db:"created_at"`
	UpdatedAt      time.Time       `json:"updated_at" db:"updated_at"`
}

// rowColumns selects every field of Row from outbox o.
const rowColumns = `o.key, o.seq, o.agent_run_id, o.step_id, o.tool_name, o.business_scope, o.kind, o.payload,
	o.status, o.attempts, o.next_attempt_at, o.first_attempt_at, o.last_error, o.last_problem, o.response,
	o.response_status, o.forward_key, o.note, o.leased_by, o.lease_expires_at, o.created_at, o.updated_at`

// Str returns *p, or "" for nil.
func Str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
