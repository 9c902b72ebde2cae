package console

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/time/rate"
)

// Session settings.
const (
	sessionCookie = "drainer_console_session"
	sessionTTL    = 8 * time.Hour
	maxSessions   = 1000
	// Login attempts: a burst of loginBurst per client address, then one
	// every loginEvery.
	loginBurst = 5
	loginEvery = 10 * time.Second
	maxActor   = 64
)

// auth holds the token, the open sessions and the login rate limits.
type auth struct {
	enabled bool
	token   [32]byte // sha256 of the token, compared in constant time

	mu       sync.Mutex
	sessions map[string]*session
	limits   map[string]*rate.Limiter
}

// session is one browser session opened with the token.
type session struct {
	csrf    string
	actor   string
	expires time.Time
}

func newAuth(enabled bool, token string) *auth {
	return &auth{enabled: enabled, token: sha256.Sum256([]byte(token)),
		sessions: map[string]*session{}, limits: map[string]*rate.Limiter{}}
}

// tokenOK compares a presented token with the configured one in constant
// time (both hashed first, so their lengths do not show either).
func (a *auth) tokenOK(presented string) bool {
	h := sha256.Sum256([]byte(presented))
	return a.enabled && subtle.ConstantTimeCompare(h[:], a.token[:]) == 1
}

// allowLogin applies the per-address login rate limit.
func (a *auth) allowLogin(r *http.Request) bool { return a.limiter(r).Allow() }

// bearerGuessesLeft says whether the address of r may present a bearer
// token now: every refused one spends the same per-address budget as a
// login (refusedBearer), so the token cannot be guessed through the API
// faster than through the login form; an accepted one spends nothing.
func (a *auth) bearerGuessesLeft(r *http.Request) bool { return a.limiter(r).Tokens() >= 1 }

// refusedBearer spends one of the address's attempts.
func (a *auth) refusedBearer(r *http.Request) { a.limiter(r).Allow() }

// limiter is the attempts' rate limiter of r's client address.
func (a *auth) limiter(r *http.Request) *rate.Limiter {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.limits[host]
	if l == nil {
		if len(a.limits) > 10000 {
			clear(a.limits)
		}
		l = rate.NewLimiter(rate.Every(loginEvery), loginBurst)
		a.limits[host] = l
	}
	return l
}

// open starts a session and returns its id.
func (a *auth) open(actor string) (string, *session) {
	id := randomHex(32)
	s := &session{csrf: randomHex(32), actor: actor, expires: time.Now().Add(sessionTTL)}
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	for k, v := range a.sessions {
		if now.After(v.expires) {
			delete(a.sessions, k)
		}
	}
	if len(a.sessions) >= maxSessions {
		clear(a.sessions)
	}
	a.sessions[id] = s
	return id, s
}

// session returns the live session of r, or nil.
func (a *auth) session(r *http.Request) *session {
	c, err := r.Cookie(sessionCookie)
	if err != nil || !a.enabled {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.sessions[c.Value]
	if s == nil {
		return nil
	}
	if time.Now().After(s.expires) {
		delete(a.sessions, c.Value)
		return nil
	}
	return s
}

func (a *auth) close(r *http.Request) {
	if c, err := r.Cookie(sessionCookie); err == nil {
		a.mu.Lock()
		delete(a.sessions, c.Value)
		a.mu.Unlock()
	}
}

// crossSite reports whether a state-changing request comes from another
// site: by Sec-Fetch-Site when the browser sends it, else by Origin.
func crossSite(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		return false
	case "":
	default:
		return true
	}
	// A client that sends no Sec-Fetch-Site: its Origin, when it sends one.
	origin := r.Header.Get("Origin")
	if origin == "" {
		return false
	}
	u, err := url.Parse(origin)
	return origin == "null" || err != nil || !strings.EqualFold(u.Host, r.Host)
}

// cleanActor bounds an actor name to printable characters.
func cleanActor(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, strings.TrimSpace(s))
	if len(s) > maxActor {
		s = s[:maxActor]
	}
	return s
}

// actorOf is the audited actor of an action: "console:<name>".
func actorOf(name string) string {
	if name = cleanActor(name); name == "" {
		name = "operator"
	}
	return "console:" + name
}

// maxLocalPath bounds a next or back address.
const maxLocalPath = 2048

// localPath returns p when it is an address of a page of this console (a
// path on its own origin, with its query), else the console's root "/".
// Browsers ignore tabs and newlines in an address and read a backslash as
// a slash, so "/<TAB>/evil.example" or "/\evil.example" would take them to
// another site (//evil.example): an address holding a control character,
// whitespace or a backslash, raw or percent-encoded, is refused, and so is
// one with a scheme or a host, or whose path does not start with exactly
// one slash once decoded.
func localPath(p string) string {
	const root = "/"
	if p == "" || len(p) > maxLocalPath || !utf8.ValidString(p) {
		return root
	}
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || !plainPath(p, false) {
		return root
	}
	u, err := url.Parse(p)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return root
	}
	// The decoded path: %2F%2F, %5C and %09 are refused like their
	// characters (a space inside, as in a run id, is kept).
	if !strings.HasPrefix(u.Path, "/") || strings.HasPrefix(u.Path, "//") || !plainPath(u.Path, true) {
		return root
	}
	return p
}

// plainPath reports whether p holds no control character, no backslash
// and, unless spaces, no whitespace.
func plainPath(p string, spaces bool) bool {
	for _, r := range p {
		if r == '\\' || unicode.IsControl(r) || r == utf8.RuneError || (unicode.IsSpace(r) && !(spaces && r == ' ')) {
			return false
		}
	}
	return true
}

// login opens a session with the token (POST /login) and goes on to next,
// a page of this console.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(nil, r.Body, maxBodyBytes)
	if err := r.ParseForm(); err != nil {
		s.render(w, r, http.StatusBadRequest, "login", pageData{Title: "Log in", Error: "bad form"})
		return
	}
	next := localPath(r.PostForm.Get("next"))
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
