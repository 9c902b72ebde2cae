package console

import (
	"cmp"
	"crypto/subtle"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

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

// ActionResult is the answer of an action: one of its fields is set.
type ActionResult struct {
	Action string `json:"action"`
	// Bulk (or one key's) requeue or cancel.
	Result *ops.Result `json:"result,omitempty"`
	// Resolved is a resolve's outcome.
	Resolved *ops.Resolved `json:"resolved,omitempty"`
	// Pause is the pause set or lifted.
	Pause *ops.Pause `json:"pause,omitempty"`
	// Filter echoes a bulk action's filter, for its Confirm.
	Filter url.Values `json:"filter,omitempty"`
}

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
		tok, found := strings.CutPrefix(h, "Bearer ")
		if !found || !s.auth.tokenOK(tok) {
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

// action serves POST /api/v1/actions/{verb}.
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
	// The database travels in the form (or JSON) like the other
	// parameters, or in the query.
	d, err := s.databaseNamed(cmp.Or(v.Get("database"), r.URL.Query().Get("database")))
	if err != nil {
		s.writeActionError(w, r, form, err)
		return
	}
	res, err := s.act(r, d, r.PathValue("verb"), v, ops.Who{Actor: actor, Reason: v.Get("reason")})
	if err != nil {
		s.writeActionError(w, r, form, err)
		return
	}
	s.log.Info("console action", "action", res.Action, "actor", actor, "database", d.Name)
	if form {
		s.render(w, r, http.StatusOK, "result", pageData{Title: "Result", Result: res, Back: backOf(v), Database: d.Name})
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// act runs one action through the operator code of the CLI.
func (s *Server) act(r *http.Request, d *db, verb string, v url.Values, who ops.Who) (*ActionResult, error) {
	ctx := r.Context()
	out := &ActionResult{Action: verb}
	dry := v.Get("dry_run") == "true" || v.Get("dry_run") == "1" || v.Get("dry_run") == "on"
	var err error
	switch verb {
	case verbRequeue, verbCancel:
		o := ops.BulkOptions{DryRun: dry, IgnoreRetryAfter: v.Get("ignore_retry_after") == "true"}
		if key := v.Get("key"); key != "" {
			if verb == verbRequeue {
				out.Result, err = d.ops.Requeue(ctx, key, who, o)
			} else {
				out.Result, err = d.ops.Cancel(ctx, key, who, dry)
			}
			return out, err
		}
		f, ferr := filterOf(v)
		if ferr != nil {
			return nil, ferr
		}
		if f.Status == "" {
			return nil, badRequest("a bulk %s needs a status filter", verb)
		}
		out.Filter = filterValues(v)
		if verb == verbRequeue {
			out.Result, err = d.ops.RequeueWhere(ctx, f, who, o)
		} else {
			out.Result, err = d.ops.CancelWhere(ctx, f, who, o)
		}
	case verbResolve:
		if strings.TrimSpace(v.Get("note")) == "" {
			return nil, badRequest("resolve needs a note saying what was checked or done")
		}
		if o := v.Get("outcome"); o != "" && o != outbox.StatusSucceeded && o != outbox.StatusFailed {
			return nil, badRequest("outcome: %q is not succeeded or failed", o)
		}
		out.Resolved, err = d.ops.Resolve(ctx, v.Get("key"), ops.Resolution{Note: v.Get("note"), Outcome: v.Get("outcome")}, who)
	case verbPause, verbResume:
		target := v.Get("target")
		if target == "" {
			target = ops.TargetRoute
		}
		if verb == verbPause {
			out.Pause, err = d.ops.Pause(ctx, target, strings.TrimSpace(v.Get("name")), who)
		} else {
			out.Pause, err = d.ops.Resume(ctx, target, strings.TrimSpace(v.Get("name")), who)
		}
	default:
		return nil, &apiError{Status: http.StatusNotFound, Msg: "no action " + strconv.Quote(verb) + ": use requeue, cancel, resolve, pause or resume"}
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// filterValues keeps a request's filter parameters.
func filterValues(v url.Values) url.Values {
	out := url.Values{}
	for _, k := range []string{"status", "tool", "run", "scope", "older_than", "payload", "database"} {
		if x := v.Get(k); x != "" {
			out.Set(k, x)
		}
	}
	return out
}

// backOf is the local page a form came from (its back field), or "/".
func backOf(v url.Values) string {
	b := v.Get("back")
	if !strings.HasPrefix(b, "/") || strings.HasPrefix(b, "//") || strings.HasPrefix(b, "/\\") {
		return "/"
	}
	return b
}

func (s *Server) writeActionError(w http.ResponseWriter, r *http.Request, form bool, err error) {
	if !form {
		s.writeAPIError(w, r, err)
		return
	}
	ae := classify(err)
	if ae.Status >= 500 {
		s.log.Error("console: action failed", "path", r.URL.Path, "err", err)
	}
	s.render(w, r, ae.Status, "result", pageData{Title: "Refused", Error: ae.Msg, Refused: ae.Refused, Back: "/"})
}

// login opens a session with the token (POST /login).
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(nil, r.Body, maxBodyBytes)
	if err := r.ParseForm(); err != nil {
		s.render(w, r, http.StatusBadRequest, "login", pageData{Title: "Log in", Error: "bad form"})
		return
	}
	next := backOf(url.Values{"back": {r.PostForm.Get("next")}})
	fail := func(status int, msg string) {
		s.render(w, r, status, "login", pageData{Title: "Log in", Error: msg, Back: next})
	}
	switch {
	case !s.cfg.Actions:
		fail(http.StatusForbidden, "actions are disabled: this console is read-only")
	case crossSite(r):
		fail(http.StatusForbidden, "cross-site request refused")
	case !s.auth.allowLogin(r):
		fail(http.StatusTooManyRequests, "too many attempts: wait a little and try again")
	case !s.auth.tokenOK(r.PostForm.Get("token")):
		s.log.Warn("console: login refused", "remote", r.RemoteAddr)
		fail(http.StatusUnauthorized, "token refused")
	default:
		actor := actorOf(r.PostForm.Get("actor"))
		id, _ := s.auth.open(actor)
		http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: "/", HttpOnly: true,
			SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: int(sessionTTL.Seconds())})
		s.log.Info("console: session opened", "actor", actor, "remote", r.RemoteAddr)
		http.Redirect(w, r, next, http.StatusSeeOther)
	}
}

// logout closes the session (POST /logout, with its CSRF token).
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(nil, r.Body, maxBodyBytes)
	_ = r.ParseForm()
	sess := s.auth.session(r)
	if crossSite(r) || sess == nil || subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(sess.csrf)) != 1 {
		s.render(w, r, http.StatusForbidden, "result", pageData{Title: "Refused", Error: "log out refused", Back: "/"})
		return
	}
	s.auth.close(r)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil, MaxAge: -1})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}
