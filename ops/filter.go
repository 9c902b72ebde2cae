package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
)

// Filter selects outbox rows. Zero fields match everything.
type Filter struct {
	Status outbox.Status
	Run    string // agent_run_id
	Tool   string // tool_name
	// OlderThan matches rows whose updated_at (the last change of the row:
	// enqueue, claim, attempt, operator action) is more than this long ago,
	// by the database clock.
	OlderThan time.Duration
	// AfterSeq matches rows with seq > AfterSeq (pagination).
	AfterSeq int64
	Scope    string // business_scope
	// Payload matches rows whose payload contains this JSON value (jsonb
	// containment: {"customer":"c1"} matches every payload with that field).
	Payload json.RawMessage
	// Keys, when not nil, matches only the rows of these keys (an empty
	// list matches none).
	Keys []string
}

// ValidateStatus reports whether s is one of the eight statuses.
func ValidateStatus(s outbox.Status) error {
	if !slices.Contains(outbox.Statuses, s) {
		return fmt.Errorf("unknown status %q: use one of %s", s, strings.Join(outbox.StatusStrings(outbox.Statuses...), ", "))
	}
	return nil
}

// Validate checks a filter's fields.
func (f Filter) Validate() error {
	var errs []error
	if f.Status != "" {
		if err := ValidateStatus(f.Status); err != nil {
			errs = append(errs, fmt.Errorf("--status: %w", err))
		}
	}
	if f.OlderThan < 0 {
		errs = append(errs, fmt.Errorf("--older-than: must not be negative, got %s", f.OlderThan))
	}
	if f.AfterSeq < 0 {
		errs = append(errs, fmt.Errorf("--after-seq: must not be negative, got %d", f.AfterSeq))
	}
	if len(f.Payload) > 0 && !json.Valid(f.Payload) {
		errs = append(errs, errors.New("payload filter: not valid JSON"))
	}
	return errors.Join(errs...)
}

// StoreFilter is the filter (except AfterSeq) as package store applies it.
func (f Filter) StoreFilter() store.Filter { return f.match() }

// match is the filter (except AfterSeq) as the store applies it.
func (f Filter) match() store.Filter {
	return store.Filter{Status: f.Status, Run: f.Run, Tool: f.Tool, OlderThan: f.OlderThan, Scope: f.Scope, Payload: f.Payload, Keys: f.Keys}
}

// Page is one page of List.
type Page struct {
	Rows []Row
	// NextAfterSeq is the --after-seq of the next page, 0 when this is the last.
	NextAfterSeq int64
}

// DefaultListLimit is List's page size unless told otherwise.
const DefaultListLimit = 50

// List returns up to limit rows matching f in seq order, starting after
// f.AfterSeq. EachListed reads the same page without holding it.
func (c *Client) List(ctx context.Context, f Filter, limit int) (Page, error) {
	rows := []Row{}
	next, err := c.EachListed(ctx, f, limit, func(r *Row) error {
		rows = append(rows, *r)
		return nil
	})
	return Page{Rows: rows, NextAfterSeq: next}, err
}

// EachListed calls fn with each row of the page List returns, payload and
// response included, as it is read, and returns the page's NextAfterSeq:
// the caller holds one row at a time, however large the page's rows are.
// An error of fn stops the page and is returned.
func (c *Client) EachListed(ctx context.Context, f Filter, limit int, fn func(*Row) error) (int64, error) {
	return eachPage(ctx, c, f, limit, c.st.EachRow, func(r *Row) int64 { return r.Seq }, fn)
}

// SummaryPage is one page of ListSummaries.
type SummaryPage struct {
	Rows []store.RowSummary
	// NextAfterSeq is the --after-seq of the next page, 0 when this is the last.
	NextAfterSeq int64
}

// ListSummaries is List without the rows' payloads and responses: what a
// table of rows shows, read in a few hundred bytes a row however large
// the rows are.
func (c *Client) ListSummaries(ctx context.Context, f Filter, limit int) (SummaryPage, error) {
	rows := []store.RowSummary{}
	read := func(ctx context.Context, db store.DB, f store.Filter, after int64, limit int, fn func(*store.RowSummary) error) error {
		got, err := c.st.ListRowSummaries(ctx, db, f, after, limit)
		for i := range got {
			if err == nil {
				err = fn(&got[i])
			}
		}
		return err
	}
	next, err := eachPage(ctx, c, f, limit, read, func(r *store.RowSummary) int64 { return r.Seq }, func(r *store.RowSummary) error {
		rows = append(rows, *r)
		return nil
	})
	return SummaryPage{Rows: rows, NextAfterSeq: next}, err
}

// eachPage reads one page of the rows matching f with read (limit+1 of
// them, to know whether more follow), hands each of the first limit to fn,
// and returns the --after-seq of the next page (0 when this is the last).
func eachPage[T any](ctx context.Context, c *Client, f Filter, limit int,
	read func(context.Context, store.DB, store.Filter, int64, int, func(*T) error) error,
	seq func(*T) int64, fn func(*T) error) (int64, error) {
	if err := f.Validate(); err != nil {
		return 0, err
	}
	if limit <= 0 {
		limit = DefaultListLimit
	}
	var n int
	var last, next int64
	err := read(ctx, c.db, f.match(), f.AfterSeq, limit+1, func(r *T) error {
		if n++; n > limit {
			next = last
			return nil
		}
		last = seq(r)
		return fn(r)
	})
	if err != nil {
		return 0, fmt.Errorf("list: %w", err)
	}
	return next, nil
}

// Unmatched names the run and tool of f that no row has at all, whatever
// its status (a misspelt name: the filter can match nothing), as notes
// for an action that matched no row.
func (c *Client) Unmatched(ctx context.Context, f Filter) ([]string, error) {
	var notes []string
	if f.Run != "" {
		ok, err := c.st.RunExists(ctx, c.db, f.Run)
		if err != nil {
			return nil, err
		}
		if !ok {
			notes = append(notes, fmt.Sprintf("no row has agent_run_id %q (of any status): check the name", f.Run))
		}
	}
	if f.Tool != "" {
		ok, err := c.st.ToolExists(ctx, c.db, f.Tool)
		if err != nil {
			return nil, err
		}
		if !ok {
			notes = append(notes, fmt.Sprintf("no row has tool_name %q (of any status): check the name", f.Tool))
		}
	}
	return notes, nil
}
