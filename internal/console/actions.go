package console

import (
	"cmp"
	"context"
	"crypto/subtle"
	"encoding/json"
	"io"
	"math"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/drainer-io/drainer/dispatch/wire"
	"github.com/drainer-io/drainer/ops"
	"github.com/drainer-io/drainer/outbox"
)

// Action verbs of POST /api/v1/actions/{verb}.
const (
	verbRequeue = "requeue"
	verbCancel  = "cancel"
	verbResolve = "resolve"
	verbPause   = "pause"
	verbResume  = "resume"
)

// maxBulkRows is the most rows one bulk action takes: the view's first
// rows in seq order (one transaction of the operator code). A larger view
// is acted on by confirming again, or with the CLI.
const maxBulkRows = 1000

// ActionResult is the answer of an action: one of Result, Resolved and
// Pause is set.
type ActionResult struct {
	// ID names the answer: its page is /results/{id} (JSON at
	// /api/v1/results/{id}), and a bulk dry run's Confirm sends it as
	// confirm.
	ID       string    `json:"id"`
	Action   string    `json:"action"`
	Actor    string    `json:"actor"`
	At       time.Time `json:"at"`
	Database string    `json:"database"`
	// Key is the row a single-row requeue or cancel named.
	Key string `json:"key,omitempty"`
	// Bulk (or one key's) requeue or cancel.
	Result *ops.Result `json:"result,omitempty"`
	// Resolved is a resolve's outcome.
	Resolved *ops.Resolved `json:"resolved,omitempty"`
	// Pause is the pause set or lifted.
	Pause *ops.Pause `json:"pause,omitempty"`
	// Filter is a bulk action's view: its filters and search; Matched says
	// how the search was read.
	Filter  url.Values `json:"filter,omitempty"`
	Matched string     `json:"matched,omitempty"`
	// Capped: the view holds more than maxBulkRows rows; the action took
	// its first maxBulkRows in seq order.
	Capped bool `json:"capped,omitempty"`
	// Confirms is the dry run a confirmation acted on; LeftOut are the
	// rows that dry run would have changed but that had left the view
	// (their status or fields changed) and were left alone.
	Confirms string   `json:"confirms,omitempty"`
	LeftOut  []string `json:"left_out,omitempty"`
	// ConfirmedBy is, for a dry run, the answer of its confirmation.
	ConfirmedBy string `json:"confirmed_by,omitempty"`
}

// Bulk reports whether the answer is a bulk action's.
func (a *ActionResult) Bulk() bool { return a.Filter != nil }

// requestValues reads an action's parameters from a form or a JSON object
// (strings, numbers and booleans).
func requestValues(r *http.Request) (url.Values, bool, error) {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	r.Body = http.MaxBytesReader(nil, r.Body, maxBodyBytes)
	if ct == "application/json" {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, false, badRequest("body: %v", err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, false, badRequest("body: not a JSON object: %v", err)
		}
		v := url.Values{}
		for k, x := range m {
			switch x := x.(type) {
			case string:
				v.Set(k, x)
			case bool:
				v.Set(k, strconv.FormatBool(x))
			case float64:
				v.Set(k, strconv.FormatFloat(x, 'f', -1, 64))
			case map[string]any:
				raw, _ := json.Marshal(x)
				v.Set(k, string(raw))
			case nil:
			default:
				return nil, false, badRequest("body: field %s: unsupported value", k)
			}
		}
		return v, false, nil
	}
	if err := r.ParseForm(); err != nil {
		return nil, false, badRequest("form: %v", err)
	}
	return r.PostForm, true, nil
}

// authorize decides whether an action may run and who runs it. It writes
// the refusal itself and returns ok=false.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, v url.Values, form bool) (actor string, ok bool) {
	refuse := func(status int, msg string) {
		s.log.Warn("console action refused", "action", r.PathValue("verb"), "http_status", status, "why", msg, "remote", r.RemoteAddr)
		s.writeActionError(w, r, form, &apiError{Status: status, Msg: msg})
	}
	if !s.cfg.Actions {
		refuse(http.StatusForbidden, "actions are disabled: this console is read-only (set console.actions and console.token)")
		return "", false
	}
	if crossSite(r) {
		refuse(http.StatusForbidden, "cross-site request refused")
		return "", false
	}
	if h := r.Header.Get("Authorization"); h != "" {
		if !s.auth.bearerGuessesLeft(r) {
			refuse(http.StatusTooManyRequests, "too many refused tokens from this address: wait a little and try again")
			return "", false
		}
		tok, found := wire.BearerToken(h)
		if !found || !s.auth.tokenOK(tok) {
			s.auth.refusedBearer(r)
			refuse(http.StatusUnauthorized, "bearer token refused")
			return "", false
		}
		return actorOf(cmp.Or(r.Header.Get("X-Drainer-Actor"), v.Get("actor"))), true
	}
	sess := s.auth.session(r)
	if sess == nil {
		refuse(http.StatusUnauthorized, "actions need the console token: log in, or send Authorization: Bearer <token>")
		return "", false
	}
	csrf := r.Header.Get("X-CSRF-Token")
	if csrf == "" {
		csrf = v.Get("csrf")
	}
	if subtle.ConstantTimeCompare([]byte(csrf), []byte(sess.csrf)) != 1 {
		refuse(http.StatusForbidden, "missing or wrong CSRF token: reload the page and try again")
		return "", false
	}
	return sess.actor, true
}

// action serves POST /api/v1/actions/{verb}. Its answer is kept and
// reached by a redirect (303) to a page of its own, /results/{id} for a
// form and /api/v1/results/{id} for JSON, so reloading the answer never
// acts again; the JSON answer is in the redirect's body too, for clients
// that do not follow it. A refusal of a form is answered the same way; a
// refusal of JSON is answered at once with its status.
func (s *Server) action(w http.ResponseWriter, r *http.Request) {
	v, form, err := requestValues(r)
	if err != nil {
		s.writeActionError(w, r, form, err)
		return
	}
	actor, ok := s.authorize(w, r, v, form)
	if !ok {
		return
	}
	verb := r.PathValue("verb")
	o := &outcome{id: randomHex(16), at: time.Now().UTC(), status: http.StatusOK, back: localPath(v.Get("back"))}
	if err := s.act(r.Context(), o, verb, v, actor); err != nil {
		ae := classify(err)
		if ae.Status >= 500 {
			s.log.Error("console action failed", "action", verb, "actor", actor, "err", err)
		} else {
			s.log.Info("console action refused", "action", verb, "actor", actor, "http_status", ae.Status, "why", ae.Msg)
		}
		if !form {
			writeJSON(w, ae.Status, errorBody(ae))
			return
		}
		o.status, o.err, o.refused, o.result, o.plan = ae.Status, ae.Msg, ae.Refused, nil, nil
	}
	s.outcomes.add(o)
	if form {
		http.Redirect(w, r, "/results/"+o.id, http.StatusSeeOther)
		return
	}
	w.Header().Set("Location", "/api/v1/results/"+o.id)
	writeJSON(w, http.StatusSeeOther, o.result)
}

// act runs one action through the operator code of the CLI, filling o.
func (s *Server) act(ctx context.Context, o *outcome, verb string, v url.Values, actor string) error {
	if err := checkFields(verb, v); err != nil {
		return err
	}
	dry, err := flag(v, "dry_run")
	if err != nil {
		return err
	}
	ignore, err := flag(v, "ignore_retry_after")
	if err != nil {
		return err
	}
	who := ops.Who{Actor: actor, Reason: v.Get("reason")}
	if id := v.Get("confirm"); id != "" {
		if dry || v.Get("key") != "" {
			return badRequest("confirm acts on the rows of dry run %q: it takes no dry_run or key", id)
		}
		return s.confirm(ctx, o, verb, id, v, who)
	}
	d, err := s.actionDatabase(ctx, verb, v)
	if err != nil {
		return err
	}
	o.database = d.Name
	res := &ActionResult{ID: o.id, Action: verb, Actor: actor, At: o.at, Database: d.Name}
	o.result = res
	switch verb {
	case verbRequeue, verbCancel:
		if key := v.Get("key"); key != "" {
			return s.rowAction(ctx, o, d, verb, key, who, dry, ignore)
		}
		if !dry {
			// The console shows a view's rows before it acts on them, and
			// acts on those only (confirm): acting on whatever matches the
			// view now could change rows nobody saw.
			return badRequest("%s of a view is a dry run first (dry_run: true), then the confirmation of its answer (confirm: its id); a single row is named by key", verb)
		}
		return s.bulk(ctx, o, d, verb, v, who, ignore)
	case verbResolve:
		key := v.Get("key")
		switch {
		case key == "":
			return badRequest("resolve needs a key")
		case strings.TrimSpace(v.Get("note")) == "":
			return badRequest("resolve needs a note saying what was checked or done")
		}
		if oc := outbox.Status(v.Get("outcome")); oc != "" && oc != outbox.StatusSucceeded && oc != outbox.StatusFailed {
			return badRequest("outcome: %q is not succeeded or failed", oc)
		}
		res.Key = key
		if res.Resolved, err = d.ops.Resolve(ctx, key, ops.Resolution{Note: v.Get("note"), Outcome: outbox.Status(v.Get("outcome"))}, who); err != nil {
			return err
		}
		s.log.Info("console action", "action", verb, "actor", actor, "database", d.Name, "key", key,
			"status", res.Resolved.Status, "answer", o.id)
	case verbPause, verbResume:
		return s.pauseAction(ctx, o, d, verb, v, who)
	default:
		return &apiError{Status: http.StatusNotFound, Msg: "no action " + strconv.Quote(verb) + ": use requeue, cancel, resolve, pause or resume"}
	}
	return nil
}

// rowAction requeues or cancels (verb) the row of key, or its dry run.
func (s *Server) rowAction(ctx context.Context, o *outcome, d *db, verb, key string, who ops.Who, dry, ignore bool) error {
	res := o.result
	res.Key = key
	var err error
	if verb == verbRequeue {
		res.Result, err = d.ops.Requeue(ctx, key, who, ops.BulkOptions{DryRun: dry, IgnoreRetryAfter: ignore})
	} else {
		res.Result, err = d.ops.Cancel(ctx, key, who, dry)
	}
	if err == nil {
		s.log.Info("console action", "action", verb, "actor", who.Actor, "database", d.Name, "key", key,
			"dry_run", dry, "count", res.Result.Count, "answer", o.id)
	}
	return err
}

// pauseAction pauses or resumes (verb) a route or an adapter.
func (s *Server) pauseAction(ctx context.Context, o *outcome, d *db, verb string, v url.Values, who ops.Who) error {
	target, name := cmp.Or(v.Get("target"), ops.TargetRoute), strings.TrimSpace(v.Get("name"))
	switch {
	case target != ops.TargetRoute && target != ops.TargetAdapter:
		return badRequest("target: %q is not route or adapter", target)
	case name == "":
		return badRequest("%s needs the name of the %s", verb, target)
	}
	res := o.result
	var err error
	if verb == verbPause {
		// A name the config does not know would pause nothing.
		if err := s.knownName(target, name); err != nil {
			return err
		}
		res.Pause, err = d.ops.Pause(ctx, target, name, who)
	} else {
		// Resume takes any name: a pause outlives its route or adapter.
		res.Pause, err = d.ops.Resume(ctx, target, name, who)
	}
	if err != nil {
		return err
	}
	s.pauses.forget()
	s.log.Info("console action", "action", verb, "actor", who.Actor, "database", d.Name, "target", target, "name", name, "answer", o.id)
	return nil
}

// bulk is the dry run of a requeue or cancel of the rows of a view (its
// filters and search): at most its first maxBulkRows. It keeps the rows it
// would change for its confirmation, which changes those of them that
// still match the view (confirm).
func (s *Server) bulk(ctx context.Context, o *outcome, d *db, verb string, v url.Values, who ops.Who, ignore bool) error {
	sel, err := s.selectionOf(ctx, d, v)
	if err != nil {
		return err
	}
	if err := bulkAllowed(verb, sel); err != nil {
		return err
	}
	keys, err := sel.keys(ctx, d, maxBulkRows+1)
	if err != nil {
		return err
	}
	res := o.result
	res.Filter, res.Matched = sel.params, sel.matched
	if len(keys) > maxBulkRows {
		keys, res.Capped = keys[:maxBulkRows], true
	}
	if res.Result, err = s.bulkOn(ctx, d, verb, sel, keys, who, ops.BulkOptions{DryRun: true, IgnoreRetryAfter: ignore}); err != nil {
		return err
	}
	o.plan = &bulkPlan{verb: verb, sel: sel, keys: changedKeys(res.Result), ignoreRetryAfter: ignore, reason: who.Reason}
	s.log.Info("console action", "action", verb, "actor", who.Actor, "database", d.Name, "view", sel.String(),
		"dry_run", true, "count", res.Result.Count, "refused", res.Result.RefusedCount, "capped", res.Capped, "answer", o.id)
	return nil
}

// confirm performs the bulk dry run id: on the rows it would have changed
// that still match its view, never on another row.
func (s *Server) confirm(ctx context.Context, o *outcome, verb, id string, v url.Values, who ops.Who) error {
	p, dryRun, err := s.outcomes.claim(id, verb)
	if err != nil {
		return err
	}
	done := ""
	defer func() { s.outcomes.settle(p, done) }()
	if name := v.Get("database"); name != "" && name != dryRun.database {
		return badRequest("confirm: dry run %q is of database %q, not %q", id, dryRun.database, name)
	}
	d, err := s.databaseNamed(dryRun.database)
	if err != nil {
		return err
	}
	who.Reason = cmp.Or(who.Reason, p.reason)
	o.database, o.back = d.Name, cmp.Or(dryRun.back, o.back)
	res := &ActionResult{ID: o.id, Action: verb, Actor: who.Actor, At: o.at, Database: d.Name,
		Filter: p.sel.params, Matched: p.sel.matched, Confirms: id}
	o.result = res
	if res.Result, err = s.bulkOn(ctx, d, verb, p.sel, p.keys, who, ops.BulkOptions{IgnoreRetryAfter: p.ignoreRetryAfter}); err != nil {
		return err
	}
	handled := map[string]bool{}
	for _, k := range changedKeys(res.Result) {
		handled[k] = true
	}
	for _, e := range res.Result.Refused {
		handled[e.Key] = true
	}
	for _, k := range p.keys {
		if !handled[k] {
			res.LeftOut = append(res.LeftOut, k)
		}
	}
	done = o.id
	s.log.Info("console action", "action", verb, "actor", who.Actor, "database", d.Name, "view", p.sel.String(),
		"confirms", id, "count", res.Result.Count, "refused", res.Result.RefusedCount, "left_out", len(res.LeftOut), "answer", o.id)
	return nil
}

// bulkOn runs verb on the rows of keys that match the view sel, listing
// every row it changes or leaves alone.
func (s *Server) bulkOn(ctx context.Context, d *db, verb string, sel *selection, keys []string, who ops.Who, o ops.BulkOptions) (*ops.Result, error) {
	o.Show = math.MaxInt
	f := sel.filter
	f.Keys = keys
	if sel.empty || len(keys) == 0 {
		// Nothing to read: an empty key list would still walk the outbox.
		return &ops.Result{Action: verb, DryRun: o.DryRun, Rows: []ops.Change{}, Refused: []*ops.TransitionError{}, Revived: []ops.Revival{}}, nil
	}
	if verb == verbRequeue {
		return d.ops.RequeueWhere(ctx, f, who, o)
	}
	return d.ops.CancelWhere(ctx, f, who, o)
}

// bulkAllowed says whether verb may act on the view sel: the CLI's rules
// for a bulk requeue (a status it takes) and a bulk cancel (pending rows
// of one run).
func bulkAllowed(verb string, sel *selection) error {
	f := sel.filter
	if f.Status == "" {
		return badRequest("a bulk %s needs a status filter", verb)
	}
	if verb == verbRequeue {
		if err := ops.RequeueStatus(f.Status); err != nil {
			return badRequest("status: %v", err)
		}
		return nil
	}
	if err := ops.CancelStatus(f.Status); err != nil {
		return badRequest("status: %v", err)
	}
	if f.Run == "" {
		return badRequest("a bulk cancel needs a run: filter on run, or search a run id")
	}
	return nil
}

// changedKeys lists the keys of the rows a result changed (or would).
func changedKeys(r *ops.Result) []string {
	out := make([]string, 0, len(r.Rows))
	for _, ch := range r.Rows {
		if !slices.Contains(out, ch.Key) {
			out = append(out, ch.Key)
		}
	}
	return out
}

// results serves GET /results/{id}: the page of an action's answer.
func (s *Server) results(w http.ResponseWriter, r *http.Request) {
	o := s.outcomes.get(r.PathValue("id"))
	if o == nil {
		s.render(w, r, http.StatusNotFound, "notfound", pageData{Title: "Not found", Error: "no answer kept at this address: " +
			"answers are kept for an hour (the latest " + strconv.Itoa(maxOutcomes) + "); the rows' audit trail records every action"})
		return
	}
	title := "Result"
	if o.err != "" {
		title = "Refused"
	}
	s.render(w, r, o.status, "result", pageData{Title: title, Result: o.result, Error: o.err, Refused: o.refused,
		Back: o.back, Database: o.database})
}

// apiResults serves GET /api/v1/results/{id}: an action's answer as JSON.
func (s *Server) apiResults(w http.ResponseWriter, r *http.Request) {
	o := s.outcomes.get(r.PathValue("id"))
	switch {
	case o == nil:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no answer kept with this id (answers are kept for an hour)"})
	case o.err != "":
		writeJSON(w, o.status, errorBody(&apiError{Status: o.status, Msg: o.err, Refused: o.refused}))
	default:
		writeJSON(w, o.status, o.result)
	}
}

func (s *Server) writeActionError(w http.ResponseWriter, r *http.Request, form bool, err error) {
	// A page's form (its session) gets a page; the API (JSON, or a form
	// with the bearer token) gets {"error": …}.
	if !form || r.Header.Get("Authorization") != "" {
		s.writeAPIError(w, r, err)
		return
	}
	ae := classify(err)
	if ae.Status >= 500 {
		s.log.Error("console: action failed", "path", r.URL.Path, "err", err)
	}
	s.render(w, r, ae.Status, "result", pageData{Title: "Refused", Error: ae.Msg, Refused: ae.Refused, Back: "/"})
}
