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
func (a *auth) allowLogin(r *http.Request) bool {
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
	return l.Allow()
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
