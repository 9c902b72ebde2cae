package conformance_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/drainer-io/drainer/internal/conformance"
	"github.com/drainer-io/drainer/internal/conformance/conformancetest"
)

// run probes h (served on loopback) in mode m and returns the report.
func run(t *testing.T, h http.Handler, m Mode, concurrency int) Report {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	rep, err := Run(context.Background(), Options{URL: srv.URL + "/v1/orders", Mode: m, Concurrency: concurrency, Payload: []byte(`{"sku":"A-1","qty":2}`)})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(rep.Checks) != len(Checks) {
		t.Fatalf("report has %d checks, want %d: %+v", len(rep.Checks), len(Checks), rep.Checks)
	}
	for i, c := range Checks {
		if rep.Checks[i].Name != c {
			t.Fatalf("check %d is %s, want %s", i, rep.Checks[i].Name, c)
		}
	}
	return rep
}

func textOf(rep Report) string {
	var b bytes.Buffer
	_ = rep.WriteText(&b)
	return b.String()
}

// TestCorrectEndpointPasses: an endpoint that honours the contract passes
// every check in its mode, and its handler ran once per key. A burst's
// first write is held until another request was answered in flight, so the
// in-flight answer is always observed.
func TestCorrectEndpointPasses(t *testing.T) {
	t.Parallel()
	for _, m := range []Mode{ModeSeed, ModeIETF} {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			e := endpoint(m, conformancetest.FlawNone, 0)
			rep := run(t, e, m, 10)
			if !rep.Passed || len(rep.Failed()) != 0 {
				t.Fatalf("a correct %s endpoint failed:\n%s", m, textOf(rep))
			}
			for _, line := range strings.Split(strings.TrimSpace(textOf(rep)), "\n") {
				if !strings.HasPrefix(line, "PASS ") {
					t.Errorf("line %q does not start with PASS", line)
				}
			}
			if r, _ := rep.Result(CheckInFlight); strings.Contains(r.Seen, "not observed") {
				t.Errorf("a held first write showed no in-flight answer: %s", r.Seen)
			}
			if n := e.MaxEffects(); n != 1 {
				t.Errorf("some key had %d effects, want 1", n)
			}
		})
	}
}

// TestFastCorrectEndpointPasses: a correct endpoint whose handler returns at
// once passes too, whether or not a request overlapped the first write.
func TestFastCorrectEndpointPasses(t *testing.T) {
	t.Parallel()
	e := endpoint(ModeSeed, conformancetest.FlawNone, 0)
	e.HoldBursts = false
	rep := run(t, e, ModeSeed, 4)
	if !rep.Passed {
		t.Fatalf("a fast correct endpoint failed:\n%s", textOf(rep))
	}
}

// TestBrokenEndpointsFail: each deliberately broken endpoint fails, naming
// the check its flaw breaks, and passes the checks it does not touch.
// Checks in maybe depend on how a burst interleaves with the first write
// (a late request meets the flaw or not) and are not asserted.
func TestBrokenEndpointsFail(t *testing.T) {
	t.Parallel()
	cases := []struct {
		flaw  conformancetest.Flaw
		mode  Mode
		fails []Check // these fail, every other check not in maybe passes
		maybe []Check
	}{
		{conformancetest.FlawNoMarker, ModeSeed, []Check{CheckReplay, CheckOneEffect}, []Check{CheckInFlight}},
		{conformancetest.FlawNoMarker, ModeIETF, []Check{CheckReplay, CheckOneEffect}, []Check{CheckInFlight}},
		{conformancetest.FlawChangedBody, ModeSeed, []Check{CheckReplay, CheckOneEffect}, nil},
		{conformancetest.FlawNoPayloadCheck, ModeSeed, []Check{CheckPayloadMismatch}, nil},
		{conformancetest.FlawCachesNothing, ModeSeed, []Check{CheckReplay, CheckPayloadMismatch, CheckInFlight, CheckOneEffect}, nil},
		{conformancetest.FlawRunsTwice, ModeSeed, []Check{CheckInFlight, CheckOneEffect}, nil},
		{conformancetest.FlawRunsTwice, ModeIETF, []Check{CheckInFlight, CheckOneEffect}, nil},
		{conformancetest.FlawMismatchNoHeader, ModeSeed, []Check{CheckPayloadMismatch}, nil},
		{conformancetest.FlawInFlightNoRetry, ModeSeed, []Check{CheckInFlight}, nil},
		{conformancetest.FlawInFlightNoRetry, ModeIETF, []Check{CheckInFlight}, nil},
		{conformancetest.FlawNoTupleCheck, ModeSeed, []Check{CheckTupleMismatch}, nil},
		{conformancetest.FlawKeyOptional, ModeSeed, []Check{CheckMissingKey}, nil},
		{conformancetest.FlawReplayKeepsStatus, ModeSeed, []Check{CheckReplay}, nil},
		{conformancetest.FlawOnlyIdempotentReplayed, ModeSeed, []Check{CheckReplay}, nil},
	}
	for _, c := range cases {
		t.Run(string(c.mode)+"/"+c.flaw.String(), func(t *testing.T) {
			t.Parallel()
			rep := run(t, endpoint(c.mode, c.flaw, 20*time.Millisecond), c.mode, 8)
			if rep.Passed {
				t.Fatalf("a broken endpoint (%s) passed:\n%s", c.flaw, textOf(rep))
			}
			for _, r := range rep.Checks {
				switch {
				case slices.Contains(c.maybe, r.Name):
				case slices.Contains(c.fails, r.Name) && r.Passed:
					t.Errorf("%s passed against an endpoint with %s:\n%s", r.Name, c.flaw, textOf(rep))
				case !slices.Contains(c.fails, r.Name) && !r.Passed:
					t.Errorf("%s failed against an endpoint whose only flaw is %s:\n%s", r.Name, c.flaw, textOf(rep))
				}
			}
			for _, name := range c.fails {
				if !strings.Contains(textOf(rep), "\nFAIL "+string(name)+": ") {
					t.Errorf("no line FAIL %s:\n%s", name, textOf(rep))
				}
			}
		})
	}
}

// TestModesDiffer: a seed endpoint probed as ietf fails where the modes
// differ (the replay status, the mismatch status), and the reverse.
func TestModesDiffer(t *testing.T) {
	t.Parallel()
	rep := run(t, endpoint(ModeSeed, conformancetest.FlawNone, 0), ModeIETF, 4)
	if got, want := rep.Failed(), []Check{CheckReplay, CheckPayloadMismatch}; !slices.Equal(got, want) {
		t.Fatalf("seed endpoint as ietf: failed %v, want %v:\n%s", got, want, textOf(rep))
	}
	rep = run(t, endpoint(ModeIETF, conformancetest.FlawNone, 0), ModeSeed, 4)
	if got, want := rep.Failed(), []Check{CheckReplay, CheckPayloadMismatch}; !slices.Equal(got, want) {
		t.Fatalf("ietf endpoint as seed: failed %v, want %v:\n%s", got, want, textOf(rep))
	}
}

// TestDownEndpointFailsEveryCheck: nothing listening is a FAIL of every
// check, each naming the missing answer, not an error.
func TestDownEndpointFailsEveryCheck(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	rep, err := Run(context.Background(), Options{URL: "http://" + addr + "/x", Concurrency: 2, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := rep.Failed(); !slices.Equal(got, Checks) {
		t.Fatalf("failed %v, want all:\n%s", got, textOf(rep))
	}
	if r, _ := rep.Result(CheckFirstWrite); !strings.Contains(r.Seen, "no answer") {
		t.Errorf("first-write says %q, want it to name the missing answer", r.Seen)
	}
}

// TestSendsOnlyToTheURL: a redirect is never followed; the place it points
// to gets no request.
func TestSendsOnlyToTheURL(t *testing.T) {
	t.Parallel()
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	redirect := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL, http.StatusTemporaryRedirect)
	})
	rep := run(t, redirect, ModeSeed, 2)
	if rep.Passed {
		t.Fatal("a redirecting endpoint passed")
	}
	if n := elsewhere.Load(); n != 0 {
		t.Fatalf("the redirect target got %d requests", n)
	}
	if r, _ := rep.Result(CheckFirstWrite); !strings.HasPrefix(r.Seen, "307") {
		t.Errorf("first-write says %q, want the 307", r.Seen)
	}
}

// TestCredentialsNeverShown: header values sent with every request appear
// in no result, nor does the URL's password.
func TestCredentialsNeverShown(t *testing.T) {
	t.Parallel()
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"title":"unauthorized","detail":"bad token"}`))
	}))
	defer srv.Close()
	u := strings.Replace(srv.URL, "http://", "http://user:hunter2@", 1) + "/v1/orders?api_key=k3y"
	rep, err := Run(context.Background(), Options{URL: u, Concurrency: 2, Header: http.Header{"Authorization": {"Bearer s3cr3t-token"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got.Load() != "Bearer s3cr3t-token" {
		t.Fatalf("the endpoint got Authorization %q", got.Load())
	}
	var b bytes.Buffer
	_ = rep.WriteJSON(&b)
	_ = rep.WriteText(&b)
	if !strings.Contains(b.String(), `/v1/orders?…"`) {
		t.Errorf("the report does not show the URL without its query:\n%s", b.String())
	}
	for _, secret := range []string{"s3cr3t", "hunter2", "k3y"} {
		if strings.Contains(b.String(), secret) {
			t.Errorf("output shows %q:\n%s", secret, b.String())
		}
	}
	if r, _ := rep.Result(CheckFirstWrite); !strings.Contains(r.Seen, "--header") {
		t.Errorf("a 401 first write says %q, want the --header hint", r.Seen)
	}
}

// TestOptionErrors: bad options are refused before anything is sent, every
// problem named at once.
func TestOptionErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		o    Options
		want []string
	}{
		{Options{}, []string{"url: missing"}},
		{Options{URL: "ftp://x/y"}, []string{"url: ftp://x/y: scheme must be http or https"}},
		{Options{URL: "http:///path"}, []string{"no host"}},
		{Options{URL: "http://a b/"}, []string{"url: not a URL"}},
		{Options{URL: "http://x/?token=t0k#frag"}, []string{"url: http://x/?…: a fragment is never sent"}},
		{Options{URL: "http://u:pw@/x"}, []string{"no host"}},
		{Options{URL: "http://x/", Mode: "strict"}, []string{`mode: "strict" is not seed or ietf`}},
		{Options{URL: "http://x/", Concurrency: 1}, []string{"concurrency: 1 is outside 2..1000"}},
		{Options{URL: "http://x/", Method: "PO ST"}, []string{"method"}},
		{Options{URL: "http://x/", Payload: []byte(`{"a":`)}, []string{"payload: not valid JSON"}},
		{Options{URL: "http://x/", Header: http.Header{"Idempotency-Key": {"k"}}}, []string{"header: Idempotency-Key is set by the checks"}},
		{Options{URL: "ftp://x/", Mode: "x", Concurrency: -1}, []string{"url:", "mode:", "concurrency:"}},
	}
	for _, c := range cases {
		_, err := Run(context.Background(), c.o)
		if err == nil {
			t.Errorf("%+v: no error", c.o)
			continue
		}
		var oe *OptionError
		if !errors.As(err, &oe) {
			t.Errorf("%+v: %v is not an *OptionError", c.o, err)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: error %q does not contain %q", c.o, err, w)
			}
		}
		if strings.Contains(err.Error(), "pw@") || strings.Contains(err.Error(), "t0k") {
			t.Errorf("error shows the URL's password: %v", err)
		}
	}
}

func TestParseHeader(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][2]string{
		"Authorization=Bearer a=b": {"Authorization", "Bearer a=b"},
		"X-Tenant=":                {"X-Tenant", ""},
		" X-A =v":                  {"X-A", "v"},
	} {
		n, v, err := ParseHeader(in)
		if err != nil || n != want[0] || v != want[1] {
			t.Errorf("ParseHeader(%q) = %q, %q, %v; want %q, %q", in, n, v, err, want[0], want[1])
		}
	}
	for in, want := range map[string]string{
		"Authorization: Bearer secret": `"Authorization…" is not Name=value`,
		"=v":                           "not a valid header name",
		"X Y=v":                        "not a valid header name",
		"X-A=a\nb":                     "X-A holds a character",
	} {
		_, _, err := ParseHeader(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseHeader(%q) error %v, want it to contain %q", in, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("ParseHeader(%q) error shows the value: %v", in, err)
		}
	}
}

// endpoint returns a conformancetest endpoint in mode m with flaw f whose
// handler takes delay.
func endpoint(m Mode, f conformancetest.Flaw, delay time.Duration) *conformancetest.Endpoint {
	e := conformancetest.New(string(m), f)
	e.Delay = delay
	return e
}

// TestFreshKeysEveryRun: every key is an idem_v1_ key never sent by an
// earlier run, sent with the tuple header that hashes to it (except by
// tuple-mismatch, which sends another tuple's), and the one request without
// a key carries no tuple either.
func TestFreshKeysEveryRun(t *testing.T) {
	t.Parallel()
	e := endpoint(ModeSeed, conformancetest.FlawNone, 0)
	var mu sync.Mutex
	type sent struct{ key, tuple string }
	var all []sent
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		all = append(all, sent{r.Header.Get(HeaderKey), r.Header.Get(HeaderTuple)})
		mu.Unlock()
		e.ServeHTTP(w, r)
	}))
	defer srv.Close()
	runKeys := make([]map[string]bool, 2)
	for i := range runKeys {
		mu.Lock()
		all = nil
		mu.Unlock()
		if _, err := Run(context.Background(), Options{URL: srv.URL, Concurrency: 3}); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		runKeys[i] = map[string]bool{}
		mismatched, keyless := 0, 0
		for _, s := range all {
			switch {
			case s.key == "" && s.tuple == "":
				keyless++
				continue
			case !strings.HasPrefix(s.key, "idem_v1_") || len(s.key) != len("idem_v1_")+32:
				t.Errorf("key %q is not an idem_v1_ key", s.key)
			}
			raw, err := base64.RawURLEncoding.DecodeString(s.tuple)
			sum := sha256.Sum256(raw)
			if err != nil || "idem_v1_"+hex.EncodeToString(sum[:16]) != s.key {
				mismatched++
			}
			runKeys[i][s.key] = true
		}
		mu.Unlock()
		if keyless != 1 || mismatched != 1 {
			t.Errorf("run %d: %d keyless requests, %d whose tuple does not hash to the key; want 1 each", i+1, keyless, mismatched)
		}
	}
	for k := range runKeys[1] {
		if runKeys[0][k] {
			t.Errorf("key %s was sent by both runs", k)
		}
	}
	if len(runKeys[0]) < 3 {
		t.Errorf("run 1 sent %d keys, want at least 3 (first write, burst, tuple mismatch)", len(runKeys[0]))
	}
}
