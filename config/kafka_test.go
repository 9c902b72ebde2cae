package config

import (
	"github.com/drainer-io/drainer/dispatch/kafka"
	"slices"
	"strings"
	"testing"
)

// TestKafkaAdapter: a kafka adapter with every field, secrets and brokers
// from references.
func TestKafkaAdapter(t *testing.T) {
	testEnv["KAFKA_BROKERS"] = "k1:9092,k2:9093"
	testEnv["KAFKA_PASSWORD"] = "kafka-pw-31f0"
	defer delete(testEnv, "KAFKA_BROKERS")
	defer delete(testEnv, "KAFKA_PASSWORD")
	cfg := mustParse(t, `
adapters:
  events:
    type: kafka
    brokers: ["${env:KAFKA_BROKERS}", "k3:9092"]
    topic: agents.{tool_name}
    tls: {ca_file: /etc/kafka/ca.pem, cert_file: /etc/kafka/client.pem, key_file: /etc/kafka/client.key, server_name: kafka.internal}
    sasl: {mechanism: SCRAM-SHA-512, username: drainer, password: "${env:KAFKA_PASSWORD}"}
    timeout: 5s
  plain_tls: {type: kafka, brokers: ["k:9092"], topic: orders, tls: {}}
routes:
  create_order: {adapter: events}
  ship_order: {adapter: plain_tls}
`, true)
	if settingsOf[kafka.Settings](t, cfg.Adapters["plain_tls"]).TLS == nil {
		t.Error("tls: {} decoded as no TLS; it means TLS with the system roots")
	}
	a := settingsOf[kafka.Settings](t, cfg.Adapters["events"])
	if !slices.Equal(a.Brokers, []string{"k1:9092,k2:9093", "k3:9092"}) || a.Topic != "agents.{tool_name}" {
		t.Errorf("brokers %q, topic %q", a.Brokers, a.Topic)
	}
	if a.TLS == nil || a.TLS.CAFile != "/etc/kafka/ca.pem" || a.TLS.KeyFile != "/etc/kafka/client.key" || a.TLS.ServerName != "kafka.internal" {
		t.Errorf("tls %+v", a.TLS)
	}
	if a.SASL == nil || a.SASL.Mechanism != "SCRAM-SHA-512" || a.SASL.Username != "drainer" || a.SASL.Password != "kafka-pw-31f0" {
		t.Errorf("sasl %+v", a.SASL)
	}
}

// TestKafkaAdapterErrors: every problem at once, each at its line; a topic
// template that makes an invalid topic for a route is an error at the route.
func TestKafkaAdapterErrors(t *testing.T) {
	testEnv["KAFKA_BAD"] = "http://k1:9092"
	defer delete(testEnv, "KAFKA_BAD")
	_, err := parse(t, `
adapters:
  k1:
    type: kafka
    brokers: ["k1", "${env:KAFKA_BAD}"]
    topic: "orders/{tool_name}"
    sasl: {mechanism: GSSAPI, password: hunter2}
    url: http://x
  k2:
    type: kafka
    brokers: [k:9092]
    topic: "a.{tool_name}"
    tls: {cert_file: /c.pem}
  k3: {type: kafka, brokers: ["k:9092"], topic: "{tool}"}
  k4: {type: kafka, brokers: ["k:9092"], topic: ".."}
routes:
  t1: {adapter: k1}
  "ship order": {adapter: k2}
  ok_tool: {adapter: k2}
  t3: {adapter: k3}
  t4: {adapter: k4}
`, true)
	got := errorLines(t, err)
	want := []string{
		`c.yaml:4:15: adapters.k1.brokers[0]: must be host:port, got "k1"`,
		`c.yaml:4:21: adapters.k1.brokers[1]: the value of "${env:KAFKA_BAD}" must be host:port, or a comma-separated list of them`,
		`c.yaml:5:12: adapters.k1.topic: "orders/{tool_name}": "/" is not allowed in a topic name (letters, digits, '.', '_' and '-' only)`,
		`c.yaml:6:23: adapters.k1.sasl.mechanism: must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, got "GSSAPI"`,
		`c.yaml:6:5: adapters.k1.sasl.username: required field is missing`,
		`c.yaml:6:41: adapters.k1.sasl.password: secret values must come from ${env:NAME} or ${file:/path}, not the config text`,
		`c.yaml:7:5: adapters.k1.url: field url is not valid for adapter type kafka (only for http, mcp)`,
		`c.yaml:12:5: adapters.k2.tls: cert_file and key_file go together (a client certificate and its key)`,
		`c.yaml:17:3: routes.ship order: adapter k2 cannot write this route: topic a.{tool_name} for tool "ship order": topic name "a.ship order" holds ' ' at byte 6 (letters, digits, '.', '_' and '-' only)`,
		`c.yaml:13:49: adapters.k3.topic: "{tool}": {tool_name} is the only variable of a topic`,
		`c.yaml:14:49: adapters.k4.topic: ".." is not a valid topic name`,
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("missing error:\n  %s\ngot:\n  %s", w, strings.Join(got, "\n  "))
		}
	}
	for _, g := range got {
		if strings.Contains(g, "hunter2") || strings.Contains(g, "http://k1") {
			t.Errorf("error reveals a value that came from a secret or a reference: %s", g)
		}
	}
}
