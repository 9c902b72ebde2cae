package stripe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/dispatchtest"
)

// stripeMockModule is the stripe-mock release the tests run against.
const stripeMockModule = "github.com/stripe/stripe-mock@v0.203.0"

// stripeMockPath finds the stripe-mock binary, installing it with go install
// the first time it is missing; the answer is shared by the test binary.
var stripeMockPath = sync.OnceValues(func() (string, error) {
	if p, err := exec.LookPath("stripe-mock"); err == nil {
		return p, nil
	}
	bin, err := goBinDir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(bin, "stripe-mock")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "install", stripeMockModule)
	cmd.Dir = os.TempDir() // outside this module: go install pkg@version ignores go.mod anyway
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("stripe-mock is not in PATH nor in %s, and `go install %s` failed: %v\n%s",
			bin, stripeMockModule, err, out)
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("`go install %s` succeeded but %s is missing: %v", stripeMockModule, p, err)
	}
	return p, nil
})

// goBinDir is where go install puts binaries: GOBIN, else GOPATH's first
// entry + /bin.
func goBinDir() (string, error) {
	out, err := exec.Command("go", "env", "GOBIN", "GOPATH").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOBIN GOPATH: %v", err)
	}
	// One line per variable; an unset GOBIN is an empty first line, which
	// trimming the whole output would drop.
	lines := strings.Split(string(out), "\n")
	if len(lines) > 0 && strings.TrimSpace(lines[0]) != "" {
		return strings.TrimSpace(lines[0]), nil
	}
	if len(lines) < 2 || strings.TrimSpace(lines[1]) == "" {
		return "", errors.New("go env reports neither GOBIN nor GOPATH")
	}
	return filepath.Join(filepath.SplitList(strings.TrimSpace(lines[1]))[0], "bin"), nil
}

// addrWriter receives stripe-mock's output and reports the HTTP address it
// announces ("Listening for HTTP at address: [::]:41234").
type addrWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	found chan string
	sent  bool
}

func (w *addrWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.sent {
		const prefix = "Listening for HTTP at address: "
		for line := range strings.Lines(w.buf.String()) {
			if addr, ok := strings.CutPrefix(line, prefix); ok && strings.HasSuffix(line, "\n") {
				w.found <- strings.TrimSpace(addr)
				w.sent = true
				break
			}
		}
	}
	return len(p), nil
}

func (w *addrWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// startStripeMock runs stripe-mock on a port of its choosing for the test
// and returns its base URL once it accepts connections.
func startStripeMock(t testing.TB) string {
	t.Helper()
	path, err := stripeMockPath()
	if err != nil {
		t.Fatalf("the stripe adapter tests need stripe-mock: %v", err)
	}
	out := &addrWriter{found: make(chan string, 1)}
	cmd := exec.Command(path, "-http-port", "0") // HTTP only, port chosen by the kernel
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	var addr string
	select {
	case addr = <-out.found:
	case err := <-exited:
		exited <- err // for the cleanup
		t.Fatalf("stripe-mock exited before listening: %v\n%s", err, out)
	case <-time.After(60 * time.Second):
		t.Fatalf("stripe-mock did not announce its HTTP address within 60s:\n%s", out)
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("stripe-mock announced %q: %v", addr, err)
	}
	hostPort := net.JoinHostPort("127.0.0.1", port)
	for deadline := time.Now().Add(30 * time.Second); ; {
		c, err := net.DialTimeout("tcp", hostPort, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stripe-mock at %s does not accept connections: %v", hostPort, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "http://" + hostPort
}

// TestStripeMock creates objects on stripe-mock, which checks every request
// against Stripe's OpenAPI specification: paths, parameter names and types,
// the nested form encoding, authentication.
func TestStripeMock(t *testing.T) {
	base := startStripeMock(t)
	a := newTestAdapter(t, base, nil)

	created := []struct {
		tool, payload, object string
	}{
		{"create_customer", `{"email":"jenny@example.com","name":"Jenny Rosen","metadata":{"order":"A-17","tier":"gold"},` +
			`"preferred_locales":["fr","en"],"balance":-150,"tax_exempt":null,"address":{"city":"Lyon","country":"FR"}}`, "customer"},
		{"stripe.charges.create", `{"amount":1250,"currency":"eur","source":"tok_visa","capture":false,"description":"order A-17"}`, "charge"},
		{"create_payment_intent", `{"amount":2000,"currency":"usd","payment_method_types":["card"],"confirm":false,` +
			`"metadata":{"order":"A-18"},"automatic_payment_methods":null}`, "payment_intent"},
		{"refund_charge", `{"charge":"ch_123","amount":500,"reason":"requested_by_customer"}`, "refund"},
		{"create_product", `{"name":"T-shirt","active":true}`, "product"},
	}
	for _, c := range created {
		t.Run(c.tool, func(t *testing.T) {
			m := dispatchtest.NewMessage(c.tool, c.payload)
			r := dispatchOK(t, a, m)
			if r.Outcome != dispatch.Success || r.Status != 200 {
				t.Fatalf("got %s (status %d, err %v), want success", r.Outcome, r.Status, r.Err)
			}
			var obj struct{ ID, Object string }
			if err := json.Unmarshal(r.Response, &obj); err != nil || obj.ID == "" || obj.Object != c.object {
				t.Errorf("response %.200s: want a %s with an id (%v)", r.Response, c.object, err)
			}
		})
	}

	refused := []struct {
		name, tool, payload, message string
	}{
		{"unknown parameter", "create_customer", `{"not_a_param":"` + payloadSecret + `"}`, "additional properties are not allowed"},
		{"not numeric", "create_charge", `{"amount":"twelve","currency":"eur"}`, "object property 'amount' validation failed: value is not numeric"},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			m := dispatchtest.NewMessage(c.tool, c.payload)
			r := dispatchOK(t, a, m)
			if r.Outcome != dispatch.Terminal || r.Reason != ReasonInvalidRequestError || r.Status != 400 {
				t.Fatalf("got %s/%s (status %d, err %v), want terminal invalid_request_error", r.Outcome, r.Reason, r.Status, r.Err)
			}
			var apiErr *APIError
			if !errors.As(r.Err, &apiErr) || apiErr.Type != TypeInvalidRequestError || !strings.Contains(apiErr.Message, c.message) {
				t.Errorf("Err %v, want Stripe's message containing %q", r.Err, c.message)
			}
			if !strings.HasPrefix(r.Err.Error(), "stripe http 400: invalid_request_error: Request validation error") {
				t.Errorf("Err %q", r.Err)
			}
		})
	}

	t.Run("bad key", func(t *testing.T) {
		const badKey = "rk_wrong_s3cr3t"
		bad := newTestAdapter(t, base, func(c *Config) { c.APIKey = badKey })
		r := bad.Dispatch(t.Context(), dispatchtest.NewMessage("create_customer", `{}`))
		if r.Outcome != dispatch.Auth || r.Status != 401 {
			t.Fatalf("got %s (status %d, err %v), want auth", r.Outcome, r.Status, r.Err)
		}
		// stripe-mock quotes the Authorization header it got.
		if msg := r.Err.Error(); strings.Contains(msg, badKey) || !strings.Contains(msg, "Authorization was 'Bearer <redacted>'") {
			t.Errorf("Err %q: want the key replaced", msg)
		}
	})
}
