package builtin

import (
	"os"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/config"
)

// The property `drainer check` promises: a config it accepts is one `drainer
// run` builds. Configure is the part of Build that turns each adapter's
// settings into its runtime config and validates it, before any connection
// is made; check and run must apply the same rules, so a config Parse
// accepts must pass Configure.

// agreementEnv resolves every reference the cases use.
var agreementEnv = map[string]string{
	"TOKEN":     "t0ken",
	"DSN":       "postgres://app:pw@db/app",
	"KV_DSN":    "host=db user=app password=pw dbname=app",
	"API_KEY":   "sk_test_123",
	"SPACE_KEY": "sk test 123",
	"PASSWORD":  "secret-pw",
	"BLANK":     "   ",
	"BROKERS":   "k1:9092,k2:9092",
}

// parseForAgreement parses one adapter section (YAML lines under the
// adapter's name) with a route using it, as `drainer check` does with every
// reference set.
func parseForAgreement(section string) (*config.Config, error) {
	var b strings.Builder
	b.WriteString("adapters:\n  a:\n")
	for line := range strings.SplitSeq(strings.Trim(section, "\n"), "\n") {
		b.WriteString("    " + line + "\n")
	}
	b.WriteString("routes:\n  charge_card: {adapter: a}\n  other.tool: {adapter: a}\n")
	return config.Parse("c.yaml", []byte(b.String()), config.LoadOptions{
		Check: true,
		LookupEnv: func(name string) (string, bool) {
			v, ok := agreementEnv[name]
			return v, ok
		},
		ReadFile: func(string) ([]byte, error) { return []byte("from-file"), nil },
	})
}

// checkAgreement fails when Parse accepts what Configure refuses.
func checkAgreement(t *testing.T, section string) (accepted bool) {
	t.Helper()
	cfg, err := parseForAgreement(section)
	if err != nil {
		return false
	}
	if _, err := configure(cfg, Options{}); err != nil {
		t.Errorf("check accepts, run refuses:\n%s\nrun: %v", section, err)
	}
	return true
}

// pluginCommand is an executable that exists: the test binary.
func pluginCommand(t testing.TB) string {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

func agreementCases(t testing.TB) map[string]string {
	exe := pluginCommand(t)
	return map[string]string{
		"http":                          "type: http\nurl: http://h/{tool_name}\nheaders: {Authorization: 'Bearer ${env:TOKEN}', X-Tenant: acme}",
		"http header Host":              "type: http\nurl: http://h/x\nheaders: {Host: example.com}",
		"http header Content-Type":      "type: http\nurl: http://h/x\nheaders: {Content-Type: text/plain}",
		"http header Transfer-Encoding": "type: http\nurl: http://h/x\nheaders: {Transfer-Encoding: chunked}",
		"http header lower host":        "type: http\nurl: http://h/x\nheaders: {host: example.com}",
		"http header tab value":         "type: http\nurl: http://h/x\nheaders: {X-A: \"a\\tb\"}",
		"http header DEL value":         "type: http\nurl: http://h/x\nheaders: {X-A: \"a\\x7fb\"}",
		"http url userinfo":             "type: http\nurl: http://u:${env:PASSWORD}@h/x",
		"http url fragment":             "type: http\nurl: http://h/x#frag",
		"http url from env":             "type: http\nurl: ${env:TOKEN}",
		"http key in query":             "type: http\nurl: http://h/x?idem=1\nidempotency_key: {name: idem2, location: query}",
		"http key header Host":          "type: http\nurl: http://h/x\nidempotency_key: {name: Host}",
		"http key header User-Agent":    "type: http\nurl: http://h/x\nidempotency_key: {name: User-Agent}",
		"http key body":                 "type: http\nurl: http://h/x\nidempotency_key: {name: request_id, location: body}",
		"mcp":                           "type: mcp\nurl: https://tools/mcp\nheaders: {Authorization: 'Bearer ${env:TOKEN}'}",
		"mcp header Host":               "type: mcp\nurl: https://tools/mcp\nheaders: {Host: x}",
		"mcp header Accept":             "type: mcp\nurl: https://tools/mcp\nheaders: {Accept: x}",
		"mcp header Transfer-Encoding":  "type: mcp\nurl: https://tools/mcp\nheaders: {Transfer-Encoding: x}",
		"mcp header bad name":           "type: mcp\nurl: https://tools/mcp\nheaders: {\"X\\u00e9\": x}",
		"mcp url fragment":              "type: mcp\nurl: https://tools/mcp#f",
		"mcp url userinfo":              "type: mcp\nurl: https://u:${env:PASSWORD}@tools/mcp",
		"stripe":                        "type: stripe\napi_key: ${env:API_KEY}\nstripe_version: 2024-06-20\ntools: {charge_card: /v1/charges}",
		"stripe key with spaces":        "type: stripe\napi_key: ${env:SPACE_KEY}",
		"stripe base_url query":         "type: stripe\napi_key: ${env:API_KEY}\nbase_url: http://localhost:12111/?x=1",
		"stripe base_url userinfo":      "type: stripe\napi_key: ${env:API_KEY}\nbase_url: http://u:${env:PASSWORD}@localhost:12111",
		"stripe tool empty name":        "type: stripe\napi_key: ${env:API_KEY}\ntools: {'': /v1/charges}",
		"postgres":                      "type: postgres\ndsn: ${env:DSN}\ntable: app.events",
		"postgres dollar table":         "type: postgres\ndsn: ${env:DSN}\ntable: ev$ents",
		"postgres blank dsn":            "type: postgres\ndsn: ${env:BLANK}\ntable: events",
		"postgres three parts":          "type: postgres\ndsn: ${env:DSN}\ntable: a.b.c",
		"river":                         "type: river\ndsn: ${env:KV_DSN}\njob_kind: send_email\nqueue: outbox\nschema: river",
		"river queue pipe":              "type: river\ndsn: ${env:DSN}\njob_kind: send_email\nqueue: a|b",
		"river queue dash":              "type: river\ndsn: ${env:DSN}\njob_kind: send_email\nqueue: a-b_c",
		"river schema dollar":           "type: river\ndsn: ${env:DSN}\njob_kind: send_email\nschema: ri$ver",
		"river schema long":             "type: river\ndsn: ${env:DSN}\njob_kind: send_email\nschema: " + strings.Repeat("s", 50),
		"river kind one letter":         "type: river\ndsn: ${env:DSN}\njob_kind: x",
		"river kind with space":         "type: river\ndsn: ${env:DSN}\njob_kind: send email",
		"river no kind":                 "type: river\ndsn: ${env:DSN}",
		"nats":                          "type: nats\nservers: [nats://n1:4222, tls://n2:4222]\nsubject: outbox.events\nstream: OUTBOX",
		"nats tool token":               "type: nats\nservers: [nats://n1:4222]\nsubject: outbox.{tool_name}",
		"nats partial tool token":       "type: nats\nservers: [nats://n1:4222]\nsubject: outbox.x{tool_name}",
		"nats two tool tokens":          "type: nats\nservers: [nats://n1:4222]\nsubject: '{tool_name}.{tool_name}'",
		"nats password":                 "type: nats\nservers: ['nats://u:${env:PASSWORD}@n1:4222']\nsubject: a",
		"nats empty stream":             "type: nats\nservers: [nats://n1:4222]\nsubject: a\nstream: ''",
		"kafka":                         "type: kafka\nbrokers: ['${env:BROKERS}', k3:9092]\ntopic: agents.{tool_name}\ntls: {ca_file: /etc/ca.pem}\nsasl: {mechanism: SCRAM-SHA-512, username: u, password: '${env:PASSWORD}'}",
		"kafka empty broker part":       "type: kafka\nbrokers: ['k1:9092,']\ntopic: t",
		"kafka scheme":                  "type: kafka\nbrokers: ['kafka://k1:9092']\ntopic: t",
		"kafka tls half pair":           "type: kafka\nbrokers: [k1:9092]\ntopic: t\ntls: {cert_file: /c.pem}",
		"kafka sasl mechanism":          "type: kafka\nbrokers: [k1:9092]\ntopic: t\nsasl: {mechanism: GSSAPI, username: u, password: '${env:PASSWORD}'}",
		"kafka topic dot tool":          "type: kafka\nbrokers: [k1:9092]\ntopic: '{tool_name}'",
		"plugin":                        "type: plugin\ncommand: " + exe + "\nargs: [--mode, strict]",
		"plugin sha":                    "type: plugin\ncommand: " + exe + "\nsha256: " + strings.Repeat("a", 64),
		"plugin relative":               "type: plugin\ncommand: bin/adapter",
		"plugin upper sha":              "type: plugin\ncommand: " + exe + "\nsha256: " + strings.Repeat("A", 64),
	}
}

// TestCheckAcceptsOnlyWhatRunBuilds: for each tricky adapter section, a
// config check accepts passes the build's configuration step. The plain
// cases must be accepted, so the test cannot pass by refusing everything.
func TestCheckAcceptsOnlyWhatRunBuilds(t *testing.T) {
	for name, section := range agreementCases(t) {
		t.Run(name, func(t *testing.T) {
			accepted := checkAgreement(t, section)
			if plain := !strings.Contains(name, " "); plain && !accepted {
				_, err := parseForAgreement(section)
				t.Errorf("the plain %s case is refused: %v", name, err)
			}
		})
	}
}

// FuzzCheckAcceptsOnlyWhatRunBuilds: the same property over arbitrary
// adapter sections; its seeds are the table's cases and testdata/fuzz.
func FuzzCheckAcceptsOnlyWhatRunBuilds(f *testing.F) {
	for _, section := range agreementCases(f) {
		f.Add(section)
	}
	f.Fuzz(func(t *testing.T, section string) {
		checkAgreement(t, section)
	})
}
