package kafka

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/dispatchtest"
)

// conformancePass is the SASL password of the conformance broker: it must
// never show in an error.
const conformancePass = "kafka-s3cr3t-4e0b"

// TestConformance runs the shared adapter suite against an in-process
// broker, a new one per check, with SASL/SCRAM. Faults: a produce refused
// with NOT_ENOUGH_REPLICAS on every try of an attempt (transient),
// MESSAGE_TOO_LARGE (terminal), a produce request never answered (hang).
func TestConformance(t *testing.T) {
	// Not side by side with the other tests: the suite checks that closing
	// the adapter leaves no goroutine running, in the whole process.
	dispatchtest.Run(t, func(t *testing.T) (dispatch.Adapter, dispatchtest.Upstream, string) {
		c := newCluster(t, kfake.EnableSASL(), kfake.Superuser(MechanismSCRAMSHA256, "drainer", conformancePass),
			kfake.SeedTopics(1, dispatchtest.Tool))
		a, err := New(Config{
			Brokers: c.ListenAddrs(),
			Topic:   "{tool_name}",
			SASL:    &SASL{Mechanism: MechanismSCRAMSHA256, Username: "drainer", Password: conformancePass},
			Timeout: 2 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		return a, &upstream{c: c, sasl: a.cfg.SASL}, conformancePass
	})
}

type upstream struct {
	c    *kfake.Cluster
	sasl *SASL
}

func (u *upstream) Effects(t *testing.T, key string) int {
	return copiesByKey(readAll(t, u.c.ListenAddrs(), dispatchtest.Tool, saslOpt(*u.sasl)))[key]
}

func (u *upstream) Inject(f dispatchtest.Fault, n int) bool {
	produce := []kmsg.Key{kmsg.Produce}
	switch f {
	case dispatchtest.FaultTransient:
		// Every try of n attempts: the client's own retries included.
		u.c.Fault(kfake.Fault{Keys: produce, Err: kerr.NotEnoughReplicas, Count: n * (produceRetries + 1)})
	case dispatchtest.FaultTerminal:
		u.c.Fault(kfake.Fault{Keys: produce, Err: kerr.MessageTooLarge, Count: n})
	case dispatchtest.FaultHang:
		// No answer until well after the attempt's deadline; then the
		// connection is cut, as a broker's would be by the client's read
		// timeout (TestHang keeps a request unanswered for good).
		left := n
		u.c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
			if left--; left > 0 {
				u.c.KeepControl()
			}
			u.c.SleepControl(func() { time.Sleep(time.Second) })
			return nil, errors.New("hung produce request: connection cut"), true
		})
	default:
		return false
	}
	return true
}
