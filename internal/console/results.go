package console

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/drainer-io/drainer/ops"
)

// Answers kept for their pages.
const (
	// maxOutcomes and outcomeTTL bound the answers kept in memory: the
	// latest maxOutcomes, each for outcomeTTL.
	maxOutcomes = 128
	outcomeTTL  = time.Hour
)

// outcome is the answer of one action, kept for the page its POST
// redirects to (GET /results/{id}, or /api/v1/results/{id} for JSON), so
// that reloading the answer shows it again and never acts again.
type outcome struct {
	id       string
	at       time.Time
	status   int // the answer's HTTP status: 200, or a refusal's
	database string
	back     string
	result   *ActionResult // nil on a refusal
	err      string
	refused  *ops.TransitionError
	// plan is what a bulk dry run's Confirm acts on.
	plan *bulkPlan
}

// bulkPlan is what a bulk dry run showed, for its confirmation: the rows
// it would change, and the view they were taken from.
type bulkPlan struct {
	verb             string
	sel              *selection
	keys             []string
	ignoreRetryAfter bool
	reason           string
	// confirmation is the id of the confirmation's answer; confirming
	// while it runs; "" until then.
	confirmation string
}

// confirming marks a plan whose confirmation is under way.
const confirming = "\x00confirming"

// outcomes holds the answers of recent actions.
type outcomes struct {
	mu    sync.Mutex
	byID  map[string]*outcome
	order []string // ids, oldest first
}

func newOutcomes() *outcomes { return &outcomes{byID: map[string]*outcome{}} }

// add keeps o (its id set by the caller), dropping the expired and the
// oldest beyond maxOutcomes.
func (s *outcomes) add(o *outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for len(s.order) > 0 {
		first := s.byID[s.order[0]]
		if len(s.order) < maxOutcomes && (first == nil || now.Sub(first.at) < outcomeTTL) {
			break
		}
		delete(s.byID, s.order[0])
		s.order = s.order[1:]
	}
	s.byID[o.id] = o
	s.order = append(s.order, o.id)
}

// get returns a copy of the answer of id with its result's confirmation
// filled in, or nil when it is not (or no longer) kept.
func (s *outcomes) get(id string) *outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.byID[id]
	if o == nil || time.Since(o.at) >= outcomeTTL {
		return nil
	}
	c := *o
	if c.result != nil {
		r := *c.result
		if c.plan != nil && c.plan.confirmation != confirming {
			r.ConfirmedBy = c.plan.confirmation
		}
		c.result = &r
	}
	return &c
}

// claim takes the dry run id for its confirmation by verb: its plan and
// database, or why it cannot be confirmed. The plan is marked confirming
// until settle, so it is confirmed at most once.
func (s *outcomes) claim(id, verb string) (*bulkPlan, *outcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.byID[id]
	switch {
	case o == nil || time.Since(o.at) >= outcomeTTL:
		return nil, nil, &apiError{Status: http.StatusGone, Msg: fmt.Sprintf(
			"confirm: dry run %q is not kept (answers are kept for %s, the latest %d): run the dry run again", id, outcomeTTL, maxOutcomes)}
	case o.plan == nil:
		return nil, nil, badRequest("confirm: %q is not the answer of a bulk dry run", id)
	case o.plan.verb != verb:
		return nil, nil, badRequest("confirm: dry run %q is a %s, not a %s", id, o.plan.verb, verb)
	case o.plan.confirmation == confirming:
		return nil, nil, &apiError{Status: http.StatusConflict, Msg: fmt.Sprintf("confirm: dry run %q is being confirmed already", id)}
	case o.plan.confirmation != "":
		return nil, nil, &apiError{Status: http.StatusConflict, Msg: fmt.Sprintf(
			"confirm: dry run %q was confirmed already: its answer is /results/%s", id, o.plan.confirmation)}
	}
	o.plan.confirmation = confirming
	return o.plan, o, nil
}

// settle records the confirmation of plan p: by the answer of id, or, with
// id "", none (the confirmation failed before acting and may be tried
// again).
func (s *outcomes) settle(p *bulkPlan, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p.confirmation = id
}
