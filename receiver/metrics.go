package receiver

import (
	"errors"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// Values of the outcome label of drainer_receiver_abandoned_total.
const (
	// abandonedUnknown: the retry was answered 409 outcome-unknown and the
	// record left for a person.
	abandonedUnknown = "outcome_unknown"
	// abandonedRerun: the handler ran again (Options.RerunAbandoned).
	abandonedRerun = "rerun"
)

// newAbandonedCounter returns drainer_receiver_abandoned_total, registered
// on reg when reg is not nil; a counter already registered there under the
// name is shared. Both outcomes start at 0.
func newAbandonedCounter(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "drainer_receiver_abandoned_total",
		Help: "Keyed requests whose process stopped mid-request outside InTransaction, found by a retry after the " +
			"recovery timeout: outcome_unknown (answered 409, left for a person) or rerun (RerunAbandoned).",
	}, []string{"outcome"})
	if reg != nil {
		if err := reg.Register(c); err != nil {
			are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err)
			if !ok {
				return nil, err
			}
			existing, ok := are.ExistingCollector.(*prometheus.CounterVec)
			if !ok {
				return nil, err
			}
			c = existing
		}
	}
	c.WithLabelValues(abandonedUnknown)
	c.WithLabelValues(abandonedRerun)
	return c, nil
}

// reportAbandoned reports a record whose request stopped mid-run: counted,
// and logged with its scope and key (a person resolves an unknown outcome
// by the key; keys are not secret).
func (rc *Receiver) reportAbandoned(scope, key string, rerun bool) {
	attrs := []any{slog.String("schema", rc.opts.Schema), slog.String("scope", scope), slog.String("key", key)}
	if rerun {
		rc.abandoned.WithLabelValues(abandonedRerun).Inc()
		rc.opts.Logger.Warn("receiver: a request stopped mid-run; its handler runs again (RerunAbandoned)", attrs...)
		return
	}
	rc.abandoned.WithLabelValues(abandonedUnknown).Inc()
	rc.opts.Logger.Error("receiver: a request stopped mid-run and its effect may exist; "+
		"retries are answered 409 outcome-unknown until a person resolves the record", attrs...)
}
