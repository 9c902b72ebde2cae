package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/drainer-io/drainer/ops"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5/pgconn"
)

// Limits of the API.
const (
	defaultPageSize = 50
	maxPageSize     = 500
	// maxPayloadView is the largest payload or response shown whole; a
	// larger one is shown as its first maxPayloadView bytes.
	maxPayloadView = 64 << 10
	maxFilterLen   = 4096
	maxBodyBytes   = 64 << 10
)

// apiError is an answer other than 200 with its message.
type apiError struct {
	Status int
	Msg    string
	// Refused carries a refused transition (409).
	Refused *ops.TransitionError
	// Pauses are those read, when some database's could not be (503).
	Pauses []Pause
	// Databases are those holding a key looked for without a database,
	// when there are several (409).
	Databases []string
}

func (e *apiError) Error() string { return e.Msg }

func badRequest(format string, args ...any) error {
	return &apiError{Status: http.StatusBadRequest, Msg: fmt.Sprintf(format, args...)}
}

// classify maps an error of the operator code to its HTTP status.
func classify(err error) *apiError {
	var ae *apiError
	var nf *ops.NotFoundError
	var te *ops.TransitionError
	var pe *ops.PauseError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &nf):
		return &apiError{Status: http.StatusNotFound, Msg: nf.Error()}
	case errors.As(err, &te):
		return &apiError{Status: http.StatusConflict, Msg: te.Error(), Refused: te}
	case errors.As(err, &pe):
		return &apiError{Status: http.StatusConflict, Msg: pe.Error()}
	case errors.Is(err, ops.ErrOutcomeRequired), errors.Is(err, ops.ErrOutcomeNotAllowed), errors.Is(err, ops.ErrNoActor):
		return &apiError{Status: http.StatusBadRequest, Msg: err.Error()}
	}
	// A value of the request the database cannot take (SQLSTATE class 22:
	// a payload filter jsonb refuses, say): the request's fault, not the
	// console's.
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && strings.HasPrefix(pgErr.Code, "22") {
		return &apiError{Status: http.StatusBadRequest, Msg: "the database refused a value of the request: " + pgErr.Message}
	}
	return &apiError{Status: http.StatusInternalServerError, Msg: "internal error; see the daemon's log"}
}

// RowsPage is the answer of GET /api/v1/rows.
type RowsPage struct {
	Database string    `json:"database"`
	Rows     []RowView `json:"rows"`
	// NextAfter is the after= of the next page (keyset on seq), 0 on the last.
	NextAfter int64 `json:"next_after"`
	// Matched says how the search box was read: key, agent_run_id or
	// business_scope ("" without a search).
	Matched string `json:"matched,omitempty"`
	// NextCursor, over every database of a fleet (none named), is the
	// cursor= of the next page ("" on the last); Unread then names the
	// databases that could not be read, each with why (fleetrows.go).
	NextCursor string   `json:"next_cursor,omitempty"`
	Unread     []string `json:"databases_unread,omitempty"`
}

// RowView is a row of a list: the §2 columns without payload and response,
// which a list never reads (store.RowSummary), and their sizes as stored.
type RowView struct {
	// Database names the row's database in a list of every database of a
	// fleet.
	Database       string        `json:"database,omitempty"`
	Key            string        `json:"key"`
	Seq            int64         `json:"seq"`
	AgentRunID     string        `json:"agent_run_id"`
	StepID         string        `json:"step_id"`
	ToolName       string        `json:"tool_name"`
	BusinessScope  string        `json:"business_scope"`
	Kind           outbox.Kind   `json:"kind"`
	Status         outbox.Status `json:"status"`
	Attempts       int           `json:"attempts"`
	NextAttemptAt  time.Time     `json:"next_attempt_at"`
	LastError      *string       `json:"last_error"`
	ResponseStatus *int          `json:"response_status"`
	CreatedAt      time.Time     `json:"created_at"`
	UpdatedAt      time.Time     `json:"updated_at"`
	// PayloadStoredBytes and ResponseStoredBytes are the sizes the
	// database stores them in (after compression; null without a response).
	PayloadStoredBytes  *int `json:"payload_stored_bytes"`
	ResponseStoredBytes *int `json:"response_stored_bytes"`
}

func viewOf(r store.RowSummary) RowView {
	return RowView{Key: r.Key, Seq: r.Seq, AgentRunID: r.AgentRunID, StepID: r.StepID, ToolName: r.ToolName,
		BusinessScope: r.BusinessScope, Kind: r.Kind, Status: r.Status, Attempts: r.Attempts, NextAttemptAt: r.NextAttemptAt,
		LastError: truncStr(r.LastError, 2048), ResponseStatus: r.ResponseStatus, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
		PayloadStoredBytes: r.PayloadStoredBytes, ResponseStoredBytes: r.ResponseStoredBytes}
}

func truncStr(p *string, n int) *string {
	if p == nil || len(*p) <= n {
		return p
	}
	s := validUTF8Prefix(*p, n) + "…"
	return &s
}

func validUTF8Prefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// rows lists one page of a view for GET /api/v1/rows and the rows pages:
// up to limit rows of its selection after the seq after.
func (s *Server) rows(ctx context.Context, d *db, v url.Values) (*RowsPage, error) {
	sel, err := s.selectionOf(ctx, d, v)
	if err != nil {
		return nil, err
	}
	return s.viewPage(ctx, d, sel, v)
}

// viewPage reads the page of sel that v names (after, limit).
func (s *Server) viewPage(ctx context.Context, d *db, sel *selection, v url.Values) (*RowsPage, error) {
	limit, err := pageLimit(v)
	if err != nil {
		return nil, err
	}
	var after int64
	if a := v.Get("after"); a != "" {
		n, err := strconv.ParseInt(a, 10, 64)
		if err != nil || n < 0 {
			return nil, badRequest("after: %q is not a seq", a)
		}
		after = n
	}
	out := &RowsPage{Database: d.Name, Rows: []RowView{}, Matched: sel.matched}
	if sel.empty {
		return out, nil
	}
	if err := sel.filter.Validate(); err != nil {
		return nil, badRequest("%v", err)
	}
	// The rows without payload and response: a page holds up to
	// maxPageSize of them, and only the row page shows those.
	rows, err := d.Store.ListRowSummaries(ctx, d.DB, sel.filter.StoreFilter(), after, limit+1)
	if err != nil {
		return nil, err
	}
	if len(rows) > limit {
		rows, out.NextAfter = rows[:limit], rows[limit-1].Seq
	}
	for _, r := range rows {
		out.Rows = append(out.Rows, viewOf(r))
	}
	return out, nil
}

// pageLimit reads a page's limit= (default defaultPageSize).
func pageLimit(v url.Values) (int, error) {
	l := v.Get("limit")
	if l == "" {
		return defaultPageSize, nil
	}
	limit, err := strconv.Atoi(l)
	if err != nil || limit < 1 || limit > maxPageSize {
		return 0, badRequest("limit: must be between 1 and %d", maxPageSize)
	}
	return limit, nil
}

// RowDetail is the answer of GET /api/v1/rows/{key}.
type RowDetail struct {
	*ops.Inspection
	// Database is the database the row was found in, and Unread those that
	// could not be read, when a fleet's key is looked up with none named.
	Database string   `json:"database,omitempty"`
	Unread   []string `json:"databases_unread,omitempty"`
	// NotBefore is the row's Retry-After (or backoff) floor, when it has one.
	NotBefore *time.Time `json:"not_before"`
	// Attempts are the audit entries that record an attempt, oldest first.
	AttemptLog []ops.AuditEntry `json:"attempt_log"`
	// AuditVerified: the row's audit chain verifies, and so does every
	// ledger record that holds it, as `drainer audit verify` checks them.
	// AuditBroken lists what either found wrong, as verify names it (a
	// ledger record's own problem under the key "ledger").
	// AuditLedgerUnchecked are the ledger records holding the chain that
	// were not checked for this page (store.LedgerCheck): with no problem
	// found, the chain is then not verified against the ledger.
	AuditVerified        bool               `json:"audit_verified"`
	AuditBroken          []store.BrokenLink `json:"audit_broken"`
	AuditLedgerUnchecked []int64            `json:"audit_ledger_unchecked"`
	// chainBroken is how many of AuditBroken the chain check found (the
	// ledger's follow).
	chainBroken int
	// PayloadBytes is the payload's size; PayloadTruncated says payload
	// holds only a preview (payload_preview) of a payload too large to show.
	PayloadBytes     int    `json:"payload_bytes"`
	PayloadTruncated bool   `json:"payload_truncated"`
	PayloadPreview   string `json:"payload_preview,omitempty"`
	// ResponseTruncated, likewise for the response.
	ResponseTruncated bool   `json:"response_truncated"`
	ResponsePreview   string `json:"response_preview,omitempty"`
}

// row reads one row with its attempts, floor and verified audit chain.
func (s *Server) row(ctx context.Context, d *db, key string) (*RowDetail, error) {
	// Payload and response are read to the view's bound only: a page of a
	// large row, asked for by many at once, costs the daemon the bound
	// each, not the row's size.
	in, pv, err := d.ops.InspectPreview(ctx, key, maxPayloadView)
	if err != nil {
		return nil, err
	}
	out := &RowDetail{Inspection: in, AttemptLog: []ops.AuditEntry{}}
	if r := in.Row; r != nil {
		out.PayloadBytes = pv.PayloadBytes
		if pv.Payload != nil {
			out.PayloadTruncated, out.PayloadPreview = true, validUTF8Prefix(*pv.Payload, maxPayloadView)
		}
		if pv.Response != nil {
			out.ResponseTruncated, out.ResponsePreview = true, validUTF8Prefix(*pv.Response, maxPayloadView)
		}
		r.LastError = truncStr(r.LastError, maxPayloadView)
		if out.NotBefore, err = d.Store.RowFloor(ctx, d.DB, key); err != nil {
			return nil, err
		}
	}
	for _, e := range in.Audit {
		if e.Attempts != nil && (e.ResponseStatus != nil || e.FromStatus != nil && outbox.Status(*e.FromStatus) == outbox.StatusInFlight) {
			out.AttemptLog = append(out.AttemptLog, e)
		}
	}
	if out.AuditBroken, err = d.Store.VerifyAuditKey(ctx, d.DB, key); err != nil {
		return nil, err
	}
	ledger, err := d.Store.VerifyAuditKeyLedger(ctx, d.DB, key)
	if err != nil {
		return nil, err
	}
	out.chainBroken = len(out.AuditBroken)
	out.AuditBroken = append(out.AuditBroken, ledger.Problems...)
	out.AuditLedgerUnchecked = ledger.Unchecked
	out.AuditVerified = len(out.AuditBroken) == 0 && len(out.AuditLedgerUnchecked) == 0
	return out, nil
}

// ChainBroken are the broken links of the row's chain (the row page).
func (r *RowDetail) ChainBroken() []store.BrokenLink { return r.AuditBroken[:r.chainBroken] }

// LedgerBroken are the problems the ledger's records holding the chain
// show (the row page).
func (r *RowDetail) LedgerBroken() []store.BrokenLink { return r.AuditBroken[r.chainBroken:] }

// RunDetail is the answer of GET /api/v1/runs/{run}.
type RunDetail struct {
	AgentRunID string `json:"agent_run_id"`
	// Steps are the run's rows in seq order (forward and compensation).
	Steps []store.RunRow `json:"steps"`
	// Saga is the run's saga when the run is aborted, else null.
	Saga *store.Saga `json:"saga"`
	// Compensations are the run's compensation rows in the order the saga
	// ran them; Halted lists those that halted it (compensation_failed).
	Compensations []store.RunRow `json:"compensations"`
	Halted        []string       `json:"halted"`
	Truncated     bool           `json:"truncated"`
	// Database is the database the run was found in, and Unread those that
	// could not be read, when a fleet's run is looked up with none named.
	Database string   `json:"database,omitempty"`
	Unread   []string `json:"databases_unread,omitempty"`
}

func (s *Server) run(ctx context.Context, d *db, id string) (*RunDetail, error) {
	out := &RunDetail{AgentRunID: id, Compensations: []store.RunRow{}, Halted: []string{}}
	var err error
	if out.Steps, err = d.Store.RunRows(ctx, d.DB, id, ops.MaxRunRows+1); err != nil {
		return nil, err
	}
	if len(out.Steps) > ops.MaxRunRows {
		out.Steps, out.Truncated = out.Steps[:ops.MaxRunRows], true
	}
	if out.Saga, err = d.Store.ReadSaga(ctx, d.DB, id); err != nil {
		return nil, err
	}
	if len(out.Steps) == 0 && out.Saga == nil {
		return nil, &ops.NotFoundError{What: "run with agent_run_id " + id}
	}
	for _, r := range out.Steps {
		if r.Kind == outbox.KindCompensation {
			out.Compensations = append(out.Compensations, r)
			if r.Status == outbox.StatusCompensationFailed {
				out.Halted = append(out.Halted, r.Key)
			}
		}
	}
	return out, nil
}

// writeJSON writes v as the answer.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(true)
	_ = enc.Encode(v)
}

// api wraps a JSON handler of the database a request names (the first by
// default): errors become {"error": …} with their status.
func (s *Server) api(h func(*http.Request, *db) (any, error)) http.HandlerFunc {
	return s.apiOf(h, false)
}

// wideAPI wraps a JSON handler that, with a fleet and no database named,
// reads every database: it then gets no database (nil).
func (s *Server) wideAPI(h func(*http.Request, *db) (any, error)) http.HandlerFunc {
	return s.apiOf(h, true)
}

func (s *Server) apiOf(h func(*http.Request, *db) (any, error), wide bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var d *db
		var err error
		if !wide || !s.wholeFleet(r) {
			d, err = s.database(r)
		}
		var v any
		if err == nil {
			v, err = h(r, d)
		}
		if err != nil {
			s.writeAPIError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, v)
	}
}

func (s *Server) writeAPIError(w http.ResponseWriter, r *http.Request, err error) {
	ae := classify(err)
	if ae.Status >= 500 {
		s.log.Error("console: request failed", "path", r.URL.Path, "err", err)
	}
	writeJSON(w, ae.Status, errorBody(ae))
}

// errorBody is the JSON of an error answer: {"error": …}, with the refused
// transition of a 409.
func errorBody(ae *apiError) map[string]any {
	body := map[string]any{"error": ae.Msg}
	if ae.Refused != nil {
		body["refused"] = ae.Refused
	}
	if ae.Pauses != nil {
		body["pauses"] = ae.Pauses
	}
	if ae.Databases != nil {
		body["databases"] = ae.Databases
	}
	return body
}

// apiStats is the overview's data: of the database (without a fleet), of
// the whole fleet, or of the database named with a fleet.
func (s *Server) apiStats(r *http.Request, d *db) (any, error) {
	if s.cfg.Fleet != nil && r.URL.Query().Get("database") != "" {
		return s.stats.of(r.Context(), d)
	}
	// The whole fleet's overview costs no connection: its pauses, which
	// live in each database, are read by /api/v1/pauses.
	st := s.stats.snapshot()
	if st.Pauses == nil {
		st.Pauses = []Pause{}
	}
	return st, nil
}

// wholeFleet says whether r shows every database of a fleet (it names
// none).
func (s *Server) wholeFleet(r *http.Request) bool {
	return s.cfg.Fleet != nil && r.URL.Query().Get("database") == ""
}

// apiRows lists a page of the view of the database, or of every database
// of a fleet when none is named (fleetRows).
func (s *Server) apiRows(r *http.Request, d *db) (any, error) {
	if d == nil {
		page, _, err := s.fleetRows(r.Context(), r.URL.Query())
		return page, err
	}
	return s.rows(r.Context(), d, r.URL.Query())
}

// apiRow reads a row of the database, or, with a fleet and no database
// named, of the database holding it (fleetRow).
func (s *Server) apiRow(r *http.Request, d *db) (any, error) {
	if d == nil {
		return s.fleetRow(r.Context(), r.PathValue("key"))
	}
	return s.row(r.Context(), d, r.PathValue("key"))
}

// apiRun reads a run of the database, or, with a fleet and no database
// named, of the database holding it (fleetRun).
func (s *Server) apiRun(r *http.Request, d *db) (any, error) {
	if d == nil {
		return s.fleetRun(r.Context(), r.PathValue("run"))
	}
	return s.run(r.Context(), d, r.PathValue("run"))
}

// apiPauses lists the pauses of the database, or of every database of a
// fleet when none is named: then a database whose pauses could not be
// read makes it a 503 naming it, the others' pauses in its body.
func (s *Server) apiPauses(r *http.Request, d *db) (any, error) {
	if !s.wholeFleet(r) {
		return pausesOf(r.Context(), d)
	}
	ps, unread := s.allPauses(r.Context())
	if len(unread) > 0 {
		return nil, &apiError{Status: http.StatusServiceUnavailable, Pauses: ps,
			Msg: "the pauses of " + listNames(unread) + " could not be read: pauses holds the others'"}
	}
	return ps, nil
}
