package config

import (
	"cmp"
	"maps"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/drainer-io/drainer/dispatch/wire"
	"github.com/drainer-io/drainer/outbox"
)

// validate runs every check.
func (v *validator) validate() {
	c := v.cfg
	if v.usable("workers") && (c.Workers < 1 || c.Workers > MaxWorkers) {
		v.errorf("workers", "must be between 1 and %d, got %s", MaxWorkers, v.quoted("workers"))
	}
	if p := "max_in_flight_bytes"; v.usable(p) && c.MaxInFlightBytes < MinInFlightBytes {
		v.errorf(p, "must be at least %s (a row larger than it still goes out, one at a time), got %s", MinInFlightBytes, v.quoted(p))
	}
	v.parsesAsDatabaseURL("database_url", c.DatabaseURL)
	v.positive("lease", c.Lease)
	v.positive("unrouted_recheck", c.UnroutedRecheck)
	v.secrets("", reflect.ValueOf(c).Elem(), false)

	adapters := slices.Sorted(maps.Keys(c.Adapters))
	for _, name := range adapters {
		v.adapter(name, c.Adapters[name])
	}
	for _, name := range slices.Sorted(maps.Keys(c.Routes)) {
		v.route(name, c.Routes[name])
	}
	if p := "alerts.compensation_failed"; v.usable(p) && c.Adapters[c.Alerts.CompensationFailed] == nil {
		v.errorf(p, "unknown adapter %s%s", v.quoted(p), v.hint(p, c.Alerts.CompensationFailed, adapters, "adapter"))
	}
	v.retention()
	v.console()
	v.gateway()
	v.databases()
	v.unused(adapters)
}

// retention checks the pruning schedule.
func (v *validator) retention() {
	r := v.cfg.Retention
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"interval", r.Interval}, {"succeeded", r.Succeeded}, {"failed", r.Failed}, {"compensated", r.Compensated},
		{"cancelled", r.Cancelled}, {"audit", r.Audit}, {"tombstones", r.Tombstones}} {
		v.positive("retention."+f.name, f.d)
	}
	if f := "retention.batch_size"; v.usable(f) && (r.BatchSize < 1 || r.BatchSize > 100000) {
		v.errorf(f, "must be between 1 and 100000, got %s", v.quoted(f))
	}
	longest, where := v.cfg.LongestKeyTTL()
	if f := "retention.tombstones"; v.usable(f) && r.Tombstones != 0 && longest > 0 && r.Tombstones < longest {
		v.errorf(f, "tombstones (%s) must be kept at least as long as the longest key_ttl (%s, %s), or a late re-enqueue could be sent twice",
			formatDuration(r.Tombstones), formatDuration(longest), where)
	}
}

// unused warns about a config that cannot route anything, and about
// adapters nothing uses.
func (v *validator) unused(adapters []string) {
	c := v.cfg
	if len(c.Routes) == 0 {
		v.warnf("routes", "no routes are configured: every row stays unrouted until a config with routes is loaded")
		return
	}
	used := map[string]bool{c.Alerts.CompensationFailed: true}
	for _, r := range c.Routes {
		used[r.Adapter], used[r.Fallback] = true, true
	}
	for _, name := range adapters {
		if !used[name] {
			v.warnf("adapters."+name, "adapter %s is not used by any route, fallback or alert", name)
		}
	}
}

// adapter checks one adapter: common fields, the type's own fields, and the
// lease rule.
func (v *validator) adapter(name string, a *Adapter) {
	p := "adapters." + name
	if !validAdapterName(name) {
		v.keyErrorf(p, "adapter names are letters, digits, '_', '-' and '.', starting with a letter or digit")
	}
	if v.require(p + ".type") {
		if a.Settings != nil {
			v.adapterSettings(p, a)
		} else {
			if len(AdapterTypes()) == 0 {
				// A program that parses configs without the adapter
				// packages (dispatch/builtin imports them all).
				panic("config: no adapter type is registered; import github.com/drainer-io/drainer/dispatch/builtin")
			}
			v.errorf(p+".type", "unknown adapter type %s; valid types: %s", v.quoted(p+".type"), strings.Join(AdapterTypes(), ", "))
		}
	}
	if a.Settings == nil {
		// The type is missing or unknown: its own rules cannot run, but a
		// secret is never inline, whatever the type.
		for _, sv := range v.untyped[p] {
			v.secrets(p, sv, true)
		}
	}
	v.positive(p+".timeout", a.Timeout)
	if f := p + ".breaker.consecutive_failures"; v.usable(f) && a.Breaker.Failures() < 0 {
		v.errorf(f, "must be 0 (breaker disabled) or more, got %s", v.quoted(f))
	}
	v.positive(p+".breaker.open_for", a.Breaker.OpenFor)
	if f := p + ".max_concurrency"; v.usable(f) && a.MaxConcurrency < 1 {
		v.errorf(f, "must be at least 1 when set, got %s", v.quoted(f))
	}
	if f := p + ".key_ttl"; v.usable(f) && a.KeyTTL <= KeyTTLMargin {
		v.errorf(f, "must exceed %s (a key_idempotent row stops being sent %s before its key expires), got %s",
			formatDuration(KeyTTLMargin), formatDuration(KeyTTLMargin), v.quoted(f))
	}
	v.leaseCoversTimeout(name, a)
}

// leaseCoversTimeout checks that the lease outlives a call to the adapter,
// so that no other replica reclaims a row while it is being sent. The error
// is placed at the lease when it is written, else at the timeout.
func (v *validator) leaseCoversTimeout(name string, a *Adapter) {
	tp := "adapters." + name + ".timeout"
	lease, ok1 := v.effective("lease", v.cfg.Lease, DefaultLease)
	timeout, ok2 := v.effective(tp, a.Timeout, DefaultAdapterTimeout)
	if !ok1 || !ok2 || lease <= 0 || timeout <= 0 || lease > timeout+LeaseMargin {
		return
	}
	if v.set("lease") {
		v.errorf("lease", "lease %s must exceed the timeout of adapter %s (%s) plus %s",
			v.show("lease", lease), name, v.show(tp, timeout), formatDuration(LeaseMargin))
		return
	}
	v.errorf(tp, "timeout %s plus %s must be less than the lease (%s by default); lower the timeout or set a longer lease",
		v.show(tp, timeout), formatDuration(LeaseMargin), formatDuration(lease))
}

// validAdapterName accepts names fit for logs and metric labels.
func validAdapterName(name string) bool {
	if name == "" || !isAlnum(name[0]) {
		return false
	}
	for i := range len(name) {
		if c := name[i]; !isAlnum(c) && c != '_' && c != '-' && c != '.' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// maxToolName is the longest tool_name enqueue accepts.
const maxToolName = 1024

// route checks one route and its references to adapters and routes.
func (v *validator) route(name string, r *Route) {
	p := "routes." + name
	c := v.cfg
	if name == "" || len(name) > maxToolName || !utf8.ValidString(name) || strings.ContainsRune(name, 0) {
		v.keyErrorf(p, "a tool_name is 1 to %d bytes of UTF-8 without NUL", maxToolName)
	}
	adapters := slices.Sorted(maps.Keys(c.Adapters))
	if f := p + ".adapter"; v.require(f) && c.Adapters[r.Adapter] == nil {
		v.errorf(f, "unknown adapter %s%s", v.quoted(f), v.hint(f, r.Adapter, adapters, "adapter"))
	}
	v.oneOf(p+".class", r.Class, outbox.ClassNaturallyIdempotent, outbox.ClassKeyIdempotent, outbox.ClassNonIdempotent)
	v.oneOf(p+".ordering", r.Ordering, outbox.OrderingNone, outbox.OrderingBusinessScope)
	if f := p + ".max_attempts"; v.usable(f) && r.MaxAttempts < 1 {
		v.errorf(f, "must be at least 1, got %s", v.quoted(f))
	}
	v.backoff(p+".backoff", r.Backoff)
	if f := p + ".compensation"; v.usable(f) && c.Routes[r.Compensation] == nil {
		v.errorf(f, "no route for tool %s%s",
			v.quoted(f), v.hint(f, r.Compensation, slices.Sorted(maps.Keys(c.Routes)), "route"))
	}
	if f := p + ".compensation"; v.usable(f) && r.Compensation == name {
		v.warnf(f, "is the route's own tool: its undo calls %s again, with the forward call's key, payload and answer as its payload (forward_key, forward_payload, forward_response)", name)
	}
	if f := p + ".compensation_window"; v.usable(f) && v.set(f) {
		switch {
		case r.Compensation == "":
			v.errorf(f, "needs compensation: the window is how long the compensation can still undo the effect")
		case r.CompensationWindow <= 0:
			v.errorf(f, "must be positive, got %s", v.quoted(f))
		}
	}
	if f := p + ".reclaim_hold"; v.usable(f) && r.ReclaimHold < 0 {
		v.errorf(f, "must not be negative, got %s", v.quoted(f))
	}
	v.reclaimWithinKeyTTL(p, r)
	v.fallback(p, r, adapters)
	v.detect(p, r)
	switch f := p + ".key_ttl"; {
	case !v.usable(f):
	case r.Class != "" && r.Class != outbox.ClassKeyIdempotent:
		v.warnf(f, "has no effect on a %s route: only a key_idempotent row's sending is bounded by its key's window", r.Class)
	case r.KeyTTL <= KeyTTLMargin:
		v.errorf(f, "must exceed %s (a key_idempotent row stops being sent %s before its key expires), got %s",
			formatDuration(KeyTTLMargin), formatDuration(KeyTTLMargin), v.quoted(f))
	}
	v.routeAdapterKeys(p, name, r)
	v.routeQuerySecrets(p+".query", r.Query)
}

// detect checks a route's probe: non_idempotent routes only, an absolute URL
// whose variables are {key} and {tool_name}.
func (v *validator) detect(p string, r *Route) {
	f := p + ".detect"
	if !v.set(f) {
		return
	}
	if r.Class != outbox.ClassNonIdempotent {
		v.errorf(f, "detect is for non_idempotent routes (class is %q): other classes retry with the same key", cmp.Or(r.Class, outbox.ClassKeyIdempotent))
	}
	u := f + ".url"
	if !v.require(u) {
		return
	}
	segs, _ := splitReferences(v.src[u].raw)
	for _, s := range segs {
		if s.Scheme != "" {
			continue
		}
		for _, m := range wire.TemplateVars(s.Text) {
			if m != "{key}" && m != "{tool_name}" {
				v.errorf(u, "unknown URL variable %s; {key} and {tool_name} are the only ones", m)
				return
			}
		}
	}
	val := strings.NewReplacer("{key}", "key", "{tool_name}", "tool").Replace(r.Detect.URL)
	if strings.ContainsAny(val, "{}") {
		v.errorf(u, "unbalanced { or } in the URL")
		return
	}
	v.absoluteURL(u, val)
	v.positive(f+".timeout", r.Detect.Timeout)
	v.positive(f+".settle", r.Detect.Settle)
	if v.usable(f+".settle") && r.Detect.Settle > time.Minute {
		v.errorf(f+".settle", "must be at most 1m (it is waited twice within the row's lease), got %s", v.quoted(f+".settle"))
	}
	if name := f + ".headers"; v.set(name) {
		v.secrets(f, reflect.ValueOf(&r.Detect).Elem(), false)
	}
	v.detectFitsLease(f, r)
}

// detectFitsLease warns of a probe that cannot run after an attempt that
// timed out: the probe runs within the lease, less the daemon's margin
// (LeaseMargin), after the attempt's timeout and its 1s grace; a settle
// and one probe must fit in what is left.
func (v *validator) detectFitsLease(f string, r *Route) {
	a := v.cfg.Adapters[r.Adapter]
	if a == nil || !v.usable(f+".timeout") || !v.usable(f+".settle") {
		return
	}
	tp := "adapters." + r.Adapter + ".timeout"
	lease, ok1 := v.effective("lease", v.cfg.Lease, DefaultLease)
	timeout, ok2 := v.effective(tp, a.Timeout, DefaultAdapterTimeout)
	probeTimeout, _ := v.effective(f+".timeout", r.Detect.Timeout, DefaultDetectTimeout)
	settle, _ := v.effective(f+".settle", r.Detect.Settle, DefaultDetectSettle)
	if !ok1 || !ok2 || lease <= 0 || timeout <= 0 {
		return
	}
	left := lease - LeaseMargin - timeout - time.Second
	if need := settle + probeTimeout; left < need {
		v.warnf(f, "after an attempt that timed out, the lease (%s) leaves %s for the probe, less than its settle and timeout (%s): such rows park as outcome_unknown unprobed; set a longer lease or a shorter timeout",
			formatDuration(lease), formatDuration(max(left, 0)), formatDuration(need))
	}
}

// backoff checks a route's retry schedule.
func (v *validator) backoff(p string, b Backoff) {
	v.positive(p+".base", b.Base)
	v.positive(p+".cap", b.Cap)
	if f := p + ".max_retry_after"; v.usable(f) && b.MaxRetryAfter < 0 {
		v.errorf(f, "must not be negative, got %s", v.quoted(f))
	}
	base, ok1 := v.effective(p+".base", b.Base, DefaultBackoffBase)
	capacity, ok2 := v.effective(p+".cap", b.Cap, DefaultBackoffCap)
	if !ok1 || !ok2 || base <= 0 || capacity <= 0 || capacity >= base {
		return
	}
	if v.set(p + ".cap") {
		v.errorf(p+".cap", "cap %s must be at least base %s", v.show(p+".cap", capacity), v.show(p+".base", base))
		return
	}
	v.errorf(p+".base", "base %s must not exceed cap (%s by default)", v.show(p+".base", base), formatDuration(capacity))
}

// fallback checks a route's fallback adapter: it must exist, differ from
// the route's adapter, and is allowed only on non-critical routes whose
// requests may be sent twice.
func (v *validator) fallback(p string, r *Route, adapters []string) {
	f := p + ".fallback"
	if !v.usable(f) {
		return
	}
	switch {
	case v.cfg.Adapters[r.Fallback] == nil:
		v.errorf(f, "unknown adapter %s%s", v.quoted(f), v.hint(f, r.Fallback, adapters, "adapter"))
	case r.Fallback == r.Adapter:
		v.errorf(f, "must differ from the route's adapter")
	}
	if r.Class == outbox.ClassNonIdempotent {
		v.errorf(f, "a fallback is not allowed on a non_idempotent route: the first adapter may have had the effect")
	}
	if critical := p + ".critical"; r.IsCritical() && (!v.set(critical) || v.usable(critical)) {
		v.errorf(f, "a fallback needs critical: false (a critical route's failure aborts its run)")
	}
}

var (
	secretType    = reflect.TypeFor[Secret]()
	secretMapType = reflect.TypeFor[map[string]Secret]()
)

// dsnFields are the config's own Secret fields holding a connection string:
// only their password must come from a reference, so a password-less DSN
// (peer or certificate authentication, a .pgpass file) may be written inline.
var dsnFields = map[string]bool{"database_url": true}

// secrets enforces that secret values come from references, for every
// field of a struct a rule applies to (recursing into nested structs when
// nested is set, as in an adapter's settings): a Secret, or a field tagged
// secret:"reference", must come from references; one tagged
// secret:"password" (a connection string, a server URL) may be inline
// without a password; a header map's value must be a reference when the
// header's name is sensitive.
func (v *validator) secrets(path string, sv reflect.Value, nested bool) {
	t := sv.Type()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		f, p := sv.Field(i), join(path, name)
		rule := t.Field(i).Tag.Get("secret")
		if rule == "" && f.Type() == secretType {
			rule = wire.SecretReference
			if dsnFields[name] {
				rule = wire.SecretPassword
			}
		}
		switch {
		case name == "" || name == "-":
		case f.Kind() == reflect.String && rule != "" && v.set(p):
			v.secretValue(p, rule)
		case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.String && rule != "":
			for j := range f.Len() {
				if ep := wire.Index(p, j); v.set(ep) {
					v.secretValue(ep, rule)
				}
			}
		case f.Type() == secretMapType:
			for _, key := range slices.Sorted(maps.Keys(f.Interface().(map[string]Secret))) {
				kp := join(p, key)
				if wire.SensitiveHeader(key) && !wire.HeaderIn(key, wire.SetByDrainer) && v.set(kp) && !hasReference(v.src[kp].raw) {
					v.errorf(kp, errInlineSecret)
				}
			}
		case nested && f.Kind() == reflect.Struct:
			v.secrets(p, f, nested)
		case nested && f.Kind() == reflect.Pointer && !f.IsNil() && f.Elem().Kind() == reflect.Struct:
			v.secrets(p, f.Elem(), nested)
		}
	}
}

// secretValue applies a secret rule to the value at path as written.
func (v *validator) secretValue(path, rule string) {
	raw := v.src[path].raw
	switch rule {
	case wire.SecretQuery:
		v.querySecret(path)
	case wire.SecretPassword:
		if literalPassword(raw) {
			v.errorf(path, errInlineSecret)
		}
	default:
		if !hasReference(raw) {
			v.errorf(path, errInlineSecret)
		}
	}
}

// querySecret refuses a URL at path, as written, with a query parameter
// named like a credential (wire.CredentialParam) whose value is inline,
// naming the parameter but never its value; it reports whether it did.
func (v *validator) querySecret(path string) bool {
	name, found := wire.InlineQuerySecret(v.src[path].raw)
	if found {
		v.errorf(path, "query parameter %q: %s", name, errInlineSecret)
	}
	return found
}

// routeQuerySecrets refuses a route's fixed query parameter (its query
// key, under path) named like a credential whose value is inline.
func (v *validator) routeQuerySecrets(path string, query map[string]string) {
	for _, name := range slices.Sorted(maps.Keys(query)) {
		if qp := join(path, name); wire.CredentialParam(name) && v.set(qp) && wire.Literal(v.src[qp].raw) != "" {
			v.errorf(qp, errInlineSecret)
		}
	}
}

// absoluteURL checks an absolute http(s) URL without inline credentials
// (a password, a credential's query parameter).
func (v *validator) absoluteURL(path, val string) bool {
	u, err := url.Parse(val)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		v.errorf(path, "must be an absolute http:// or https:// URL")
		return false
	}
	if literalPassword(v.src[path].raw) {
		v.errorf(path, errInlineSecret)
		return false
	}
	return !v.querySecret(path)
}

// reclaimWithinKeyTTL warns when a key_idempotent route's window (key_ttl,
// written on the route or its adapter) is shorter than what a reclaimed row
// may wait (the lease, then its reclaim_hold or, when the provider answered
// its tool a Retry-After recently, up to max_retry_after) plus the guard's
// 1m margin: a row whose replica died mid-call could then end failed by
// the key-TTL guard, although the provider may have applied its effect.
func (v *validator) reclaimWithinKeyTTL(p string, r *Route) {
	c := v.cfg
	if r.Class != "" && r.Class != outbox.ClassKeyIdempotent {
		return
	}
	ttl, field := r.KeyTTL, p+".key_ttl"
	if a := c.Adapters[r.Adapter]; ttl == 0 && a != nil {
		ttl, field = a.KeyTTL, "adapters."+r.Adapter+".key_ttl"
	}
	if ttl <= 0 || !v.set(field) {
		return
	}
	lease := cmp.Or(c.Lease, DefaultLease)
	wait, why := r.Backoff.MaxRetryAfter, p+".backoff.max_retry_after"
	if !v.set(p + ".backoff.max_retry_after") {
		wait, why = DefaultMaxRetryAfter, p+".backoff.max_retry_after (not set: its default)"
	}
	if r.ReclaimHold > wait {
		wait, why = r.ReclaimHold, p+".reclaim_hold"
	}
	if ttl-KeyTTLMargin < lease+wait {
		v.warnf(field, "key_ttl %s (less the 1m margin) is shorter than lease %s plus %s, %s, the longest a reclaimed row of route %s may wait: a row whose replica died mid-call could end failed by the key-TTL guard though its effect may exist; set %s below %s, or raise key_ttl",
			formatDuration(ttl), formatDuration(lease), formatDuration(wait), why, strings.TrimPrefix(p, "routes."),
			strings.TrimSuffix(why, " (not set: its default)"), formatDuration(max(ttl-KeyTTLMargin-lease, 0)))
	}
}
