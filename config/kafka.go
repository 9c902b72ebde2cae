package config

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/drainer-io/drainer/dispatch/kafka"
)

// KafkaTLS is a kafka adapter's tls: PEM files and the server name the
// brokers' certificates are checked against. An empty tls: {} connects
// with TLS and the system roots.
type KafkaTLS struct {
	CAFile     string `yaml:"ca_file"`
	CertFile   string `yaml:"cert_file"`
	KeyFile    string `yaml:"key_file"`
	ServerName string `yaml:"server_name"`
}

// KafkaSASL is a kafka adapter's sasl: the mechanism (PLAIN,
// SCRAM-SHA-256, SCRAM-SHA-512), the user, and the password, which must
// come from ${env:NAME} or ${file:/path}.
type KafkaSASL struct {
	Mechanism string `yaml:"mechanism"`
	Username  string `yaml:"username"`
	Password  Secret `yaml:"password"`
}

// kafkaAdapter checks a kafka adapter with the rules of the adapter itself
// (package dispatch/kafka): broker addresses, the topic template and, for
// a template, the topic of every route the adapter serves; the TLS files
// come in pairs; SASL's mechanism and credentials.
func (v *validator) kafkaAdapter(p string, a *Adapter) {
	if f := p + ".brokers"; v.require(f) {
		if len(a.Brokers) == 0 {
			v.errorf(f, "must list at least one broker (host:port)")
		}
		for i, b := range a.Brokers {
			bp := fmt.Sprintf("%s[%d]", f, i)
			if !v.usable(bp) {
				continue
			}
			for part := range strings.SplitSeq(b, ",") {
				if err := kafka.CheckBroker(strings.TrimSpace(part)); err != nil {
					if v.src[bp].refs > 0 {
						v.errorf(bp, "the value of %s must be host:port, or a comma-separated list of them", v.quoted(bp))
					} else {
						v.errorf(bp, "%v", err)
					}
					break
				}
			}
		}
	}
	if f := p + ".topic"; v.require(f) {
		if topic, err := kafka.ParseTopic(a.Topic); err != nil {
			v.errorf(f, "%v", err)
		} else {
			v.kafkaRouteTopics(a, topic)
		}
	}
	if t := a.TLS; t != nil && (t.CertFile == "") != (t.KeyFile == "") {
		v.keyErrorf(p+".tls", "cert_file and key_file go together (a client certificate and its key)")
	}
	if f := p + ".sasl"; a.SASL != nil {
		if mf := f + ".mechanism"; v.require(mf) {
			v.oneOf(mf, a.SASL.Mechanism, kafka.Mechanisms()...)
		}
		v.require(f + ".username")
		if pf := f + ".password"; v.require(pf) && !hasReference(v.src[pf].raw) {
			v.errorf(pf, errInlineSecret)
		}
	}
}

// kafkaRouteTopics checks, for a topic template, the topic of every route
// served by the adapter (as its adapter or its fallback): a tool name that
// makes an invalid topic is an error at the route.
func (v *validator) kafkaRouteTopics(a *Adapter, topic kafka.Topic) {
	if !topic.Templated() {
		return
	}
	for _, tool := range slices.Sorted(maps.Keys(v.cfg.Routes)) {
		r := v.cfg.Routes[tool]
		if r == nil || r.Adapter != a.Name && r.Fallback != a.Name {
			continue
		}
		if _, err := topic.Expand(tool); err != nil {
			v.keyErrorf("routes."+tool, "adapter %s cannot write this route: %v", a.Name, err)
		}
	}
}
