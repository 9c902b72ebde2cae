package stripe

import (
	"testing"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/dispatchtest"
)

// TestConformance runs the shared adapter suite against fakeStripe; the
// suite's tool name is mapped to the customers endpoint.
func TestConformance(t *testing.T) {
	dispatchtest.Run(t, func(t *testing.T) (dispatch.Adapter, dispatchtest.Upstream, string) {
		up := newFakeStripe(t)
		a, err := New(Config{
			APIKey:  testAPIKey,
			BaseURL: up.srv.URL,
			Tools:   map[string]string{dispatchtest.Tool: "/v1/customers"},
		})
		if err != nil {
			t.Fatal(err)
		}
		return a, up, testAPIKey
	})
}
