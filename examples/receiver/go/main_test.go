package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/tooling/dbtest"
)

func TestMain(m *testing.M) {
	dbtest.Main(m)
}

func TestService(t *testing.T) {
	for _, inTx := range []string{"", "-outside-transaction"} {
		t.Run("mode"+inTx, func(t *testing.T) {
			t.Setenv("DATABASE_URL", dbtest.NewDatabase(t))
			ctx, cancel := context.WithCancel(context.Background())
			pr, pw := io.Pipe()
			done := make(chan error, 1)
			args := []string{"-addr", "127.0.0.1:0"}
			if inTx != "" {
				args = append(args, inTx)
			}
			go func() { done <- run(ctx, args, pw); _ = pw.Close() }()
			t.Cleanup(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("run: %v", err)
				}
			})
			line, err := bufio.NewReader(pr).ReadString('\n')
			if err != nil {
				t.Fatalf("no listening line: %v (run: %v)", err, <-done)
			}
			go func() { _, _ = io.Copy(io.Discard, pr) }()
			base := strings.TrimSpace(strings.TrimPrefix(line, "listening on "))

			send := func(key, body string) (int, string, http.Header) {
				req, _ := http.NewRequest(http.MethodPost, base+"/v1/orders", strings.NewReader(body))
				req.Header.Set("Idempotency-Key", key)
				req.Header.Set("Content-Type", "application/json")
				c := &http.Client{Timeout: 30 * time.Second}
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b), resp.Header
			}
			c1, b1, h1 := send("order-1", `{"sku":"A","qty":1}`)
			c2, b2, h2 := send("order-1", `{"qty": 1, "sku": "A"}`)
			c3, _, h3 := send("order-1", `{"sku":"B","qty":1}`)
			if c1 != 201 || h1.Get("Idempotency-Replay") != "false" || c2 != 200 || b2 != b1 || h2.Get("Idempotency-Replay") != "true" ||
				c3 != 409 || h3.Get("Idempotency-Conflict") != "payload-mismatch" {
				t.Fatalf("answers %d %q %v / %d %q %v / %d %v", c1, b1, h1, c2, b2, h2, c3, h3)
			}
			resp, err := http.Get(base + "/v1/orders/count")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if string(b) != `{"count":1}` {
				t.Fatalf("count %s, want 1", b)
			}
			resp, err = http.Get(base + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			b, _ = io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if !strings.Contains(string(b), `drainer_receiver_abandoned_total{outcome="outcome_unknown"} 0`) {
				t.Fatalf("/metrics has no drainer_receiver_abandoned_total:\n%s", b)
			}
		})
	}
}
