package natsjs

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/dispatchtest"
)

// credential is the password in the adapter's server URL; the test servers
// require none and ignore it, but it must never show in an error.
const credential = "nats-s3cr3t-19bd"

// TestConformance runs the shared adapter suite against JetStream. The
// adapter connects through a proxy that steers the publishes to be faulted
// to a subject where the real server fails them: no stream captures it
// (transient: no responders), a stream with max_msg_size 1 captures it
// (terminal), or only a subscriber that never answers listens (hang).
func TestConformance(t *testing.T) {
	url := sharedServer(t) // started before the suite's leak checks
	dispatchtest.Run(t, func(t *testing.T) (dispatch.Adapter, dispatchtest.Upstream, string) {
		up := newFaultUpstream(t, url)
		a, err := New(t.Context(), Config{
			Servers: []string{"nats://drainer:" + credential + "@" + up.proxy.addr()},
			Subject: up.subject,
			Timeout: 5 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		return a, up, credential
	})
}

// faultUpstream is a stream that captures the adapter's subject, plus the
// subjects faults are steered to.
type faultUpstream struct {
	env                        *natsEnv
	proxy                      *proxy
	subject, stream            string
	transient, terminal, stuck string // fault subjects
}

var _ dispatchtest.Upstream = (*faultUpstream)(nil)

func newFaultUpstream(t *testing.T, url string) *faultUpstream {
	t.Helper()
	e := newNATSEnv(t, url)
	up := &faultUpstream{
		env: e, proxy: newProxy(t, url),
		subject:   e.prefix + ".intents",
		transient: e.prefix + ".fault.transient",
		terminal:  e.prefix + ".fault.terminal",
		stuck:     e.prefix + ".fault.hang",
	}
	up.stream = e.createStream(t, streamSpec{subjects: []string{up.subject}})
	e.createStream(t, streamSpec{name: "_TINY", subjects: []string{up.terminal}, maxMsgSize: 1})
	sub, err := e.nc.Subscribe(up.stuck, func(m *nats.Msg) {}) // interest, never an answer
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return up
}

func (up *faultUpstream) Effects(t *testing.T, key string) int {
	return len(up.env.messages(t, up.stream, key))
}

func (up *faultUpstream) Inject(f dispatchtest.Fault, n int) bool {
	to := map[dispatchtest.Fault]string{
		dispatchtest.FaultTransient: up.transient,
		dispatchtest.FaultTerminal:  up.terminal,
		dispatchtest.FaultHang:      up.stuck,
	}[f]
	if to == "" {
		return false
	}
	up.proxy.rewriteNext(up.subject, to, n)
	return true
}
