package gateway

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Outcome is how the gateway answered one tools/call (the outcome label of
// drainer_gateway_calls_total, docs/reference.md §13).
type Outcome string

const (
	// OutcomeCreated: the call recorded a new row and was answered with its result.
	OutcomeCreated Outcome = "created"
	// OutcomeReplayed: the call's row had settled; answered from its record.
	OutcomeReplayed Outcome = "replayed"
	// OutcomeJoined: the call's row was in flight; answered when it settled.
	OutcomeJoined Outcome = "joined"
	// OutcomePassthrough: a read-only naturally idempotent tool, sent straight through.
	OutcomePassthrough Outcome = "passthrough"
	// OutcomeConflict: the tuple was recorded with other arguments; nothing sent.
	OutcomeConflict Outcome = "conflict"
	// OutcomeTimeout: the row had not settled within `wait`.
	OutcomeTimeout Outcome = "timeout"
	// OutcomeRefused: refused before anything was recorded (no token, no
	// run, bad arguments, the database unreachable).
	OutcomeRefused Outcome = "refused"
)

// Outcomes lists every outcome, for series that exist from startup.
var Outcomes = []Outcome{OutcomeCreated, OutcomeReplayed, OutcomeJoined, OutcomePassthrough,
	OutcomeConflict, OutcomeTimeout, OutcomeRefused}

// Metrics are the gateway's series. `drainer run` registers them at its
// start, gateway or not, so that every series a dashboard reads exists from
// then on (zero-valued for the tools it will serve, and tool "" without any).
type Metrics struct {
	calls   *prometheus.CounterVec
	seconds *prometheus.HistogramVec
	// settled counts the calls that found their row settled after waiting,
	// by what made them read it: the settle notification (notify), the
	// periodic read (recheck: an operator's action, or a deaf listener).
	settled *prometheus.CounterVec
	// heard counts the settle notifications the listener received: it
	// stays flat while rows settle when the listener is deaf, whatever
	// this process's own engine tells its calls (Gateway.Settled).
	heard prometheus.Counter
}

// NewMetrics registers the gateway's series on reg (nil: not registered),
// zero-valued for tools.
func NewMetrics(reg prometheus.Registerer, tools []string) *Metrics {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "drainer_gateway_calls_total",
			Help: "tools/call requests answered by the MCP gateway, by tool and outcome (created, replayed, joined, passthrough, conflict, timeout, refused).",
		}, []string{"tool", "outcome"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "drainer_gateway_call_seconds",
			Help:    "Time from a tools/call's arrival at the MCP gateway to its answer, by tool.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"tool"}),
		settled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "drainer_gateway_settled_reads_total",
			Help: "Gateway calls that saw their row settle while waiting, by what made them read it: notify (the settle notification) or recheck (the periodic read; a healthy listener leaves only rows settled by an operator or an abort).",
		}, []string{"cause"}),
		heard: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "drainer_gateway_settle_notifications_total",
			Help: "Settle notifications the MCP gateway's listener received: one per row of an mcp route settled by any replica. Flat while gateway calls settle: the listener is deaf, and calls joined to a row another replica sends wait for the periodic read.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.calls, m.seconds, m.settled, m.heard)
	}
	m.settled.WithLabelValues("notify")
	m.settled.WithLabelValues("recheck")
	// Every configured tool's series exist from startup, at zero.
	for _, t := range tools {
		for _, o := range Outcomes {
			m.calls.WithLabelValues(t, string(o))
		}
		m.seconds.WithLabelValues(t)
	}
	m.calls.WithLabelValues("", string(OutcomeRefused))
	if len(tools) == 0 {
		m.seconds.WithLabelValues("")
	}
	return m
}
