package kafka

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/drainer-io/drainer/dispatch"
)

// testCA is a CA and a certificate it signed for 127.0.0.1, written as PEM
// files.
type testCA struct {
	caFile, certFile, keyFile string
	server                    tls.Certificate
}

func newTestCA(t *testing.T, name string) testCA {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name + " CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "broker"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"kafka.internal"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	c := testCA{caFile: filepath.Join(dir, "ca.pem"), certFile: filepath.Join(dir, "cert.pem"), keyFile: filepath.Join(dir, "key.pem")}
	write := func(path, typ string, b []byte) {
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(c.caFile, "CERTIFICATE", caDER)
	write(c.certFile, "CERTIFICATE", der)
	write(c.keyFile, "EC PRIVATE KEY", keyDER)
	c.server, err = tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestTLS: a broker behind TLS is written to with the configured CA (and a
// client certificate when the broker asks for one); a broker whose
// certificate the CA did not sign is refused (auth: the adapter's
// configuration, not the row), named in the error, nothing sent, and Probe reports a refusal rather than an outage.
func TestTLS(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "good")
	pool := x509.NewCertPool()
	pem, _ := os.ReadFile(ca.caFile)
	pool.AppendCertsFromPEM(pem)
	c := newCluster(t, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{ca.server}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}))

	a := newAdapter(t, c, Config{TLS: &TLS{CAFile: ca.caFile, CertFile: ca.certFile, KeyFile: ca.keyFile}})
	wantOutcome(t, "mutual TLS", dispatchOnce(t, a, newMessage("create_order", "s", `{}`)), dispatch.Success, "")

	other := newTestCA(t, "other")
	bad := newAdapter(t, c, Config{Timeout: time.Second, TLS: &TLS{CAFile: other.caFile, CertFile: ca.certFile, KeyFile: ca.keyFile}})
	// An attempt in which no handshake got as far as the broker's
	// certificate (a dial slower than the attempt, on a loaded machine)
	// is a connect retry, rightly: the next attempt tries again.
	var r dispatch.Result
	for deadline := time.Now().Add(time.Minute); ; {
		r = dispatchOnce(t, bad, newMessage("create_order", "s", `{}`))
		if r.Outcome != dispatch.Retry || r.Reason != dispatch.ReasonConnect || time.Now().After(deadline) {
			break
		}
	}
	wantOutcome(t, "unknown CA", r, dispatch.Auth, dispatch.ReasonAuth)
	wantErrText(t, r, "certificate", c.ListenAddrs()[0])
	if !r.NotSent {
		t.Error("a refused TLS handshake: NotSent false")
	}
	if err := bad.Probe(t.Context()); err == nil || errors.Is(err, dispatch.ErrUnavailable) || !strings.Contains(err.Error(), "TLS") {
		t.Errorf("Probe with an unknown CA: %v, want a TLS refusal", err)
	}
}

// TestTLSConfigErrors: files that cannot be used are errors of New naming
// the field and the file.
func TestTLSConfigErrors(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "good")
	notPEM := filepath.Join(t.TempDir(), "ca.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tls  TLS
		want []string
	}{
		{"missing CA file", TLS{CAFile: "/nonexistent/ca.pem"}, []string{"tls.ca_file", "/nonexistent/ca.pem"}},
		{"CA file without a certificate", TLS{CAFile: notPEM}, []string{"tls.ca_file", "no PEM certificate", notPEM}},
		{"certificate without its key", TLS{CertFile: ca.certFile}, []string{"cert_file and key_file go together"}},
		{"key that does not match", TLS{CertFile: ca.certFile, KeyFile: newTestCA(t, "x").keyFile}, []string{"tls.cert_file, tls.key_file", "private key does not match"}},
		{"key file that is a certificate", TLS{CertFile: ca.certFile, KeyFile: ca.caFile}, []string{"tls.cert_file, tls.key_file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(Config{Brokers: []string{"127.0.0.1:9092"}, Topic: "t", TLS: &tc.tls})
			if err == nil {
				t.Fatal("New accepted the config")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestConfigErrors: every problem of a config at once, each naming its
// field; the SASL password never shows.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	const pass = "sasl-pass-0c2e"
	_, err := New(Config{
		Brokers: []string{"kafka://k:9092", "k", "k:0", " , "},
		Topic:   "orders/{tool_name}",
		SASL:    &SASL{Mechanism: "GSSAPI", Password: pass},
		Timeout: -time.Second,
	})
	if err == nil {
		t.Fatal("New accepted the config")
	}
	for _, w := range []string{"brokers[0]: a broker is host:port, without a scheme", `brokers[1]: must be host:port, got "k"`,
		"brokers[2]: port must be 1-65535", "topic:", "sasl.mechanism: must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512",
		"sasl.username: required", "timeout: must be positive"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
	if strings.Contains(err.Error(), pass) {
		t.Errorf("error reveals the password: %v", err)
	}
	if _, err := New(Config{Topic: "t"}); err == nil || !strings.Contains(err.Error(), "brokers: required field is missing") {
		t.Errorf("no brokers: %v", err)
	}
}

// TestParseTopic: the template's rules.
func TestParseTopic(t *testing.T) {
	t.Parallel()
	for tmpl, want := range map[string]string{
		"orders":                                 "",
		"agents.{tool_name}":                     "",
		"{tool_name}":                            "",
		"a.{tool_name}.{tool_name}":              "",
		"":                                       "required",
		"..":                                     "not a valid topic name",
		"a b":                                    "holds ' '",
		"{toolname}":                             "the only variable",
		"a/{tool_name}":                          `"/" is not allowed`,
		strings.Repeat("a", 250):                 "more than Kafka's 249",
		strings.Repeat("a", 249) + "{tool_name}": "no room for the tool name",
	} {
		_, err := ParseTopic(tmpl)
		if (err == nil) != (want == "") || err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("ParseTopic(%q) = %v, want %q", clip(tmpl), err, want)
		}
	}
	tp, _ := ParseTopic("agents.{tool_name}")
	for tool, ok := range map[string]bool{"create_order": true, "a b": false, "é": false, ".": true, strings.Repeat("x", 242): true, strings.Repeat("x", 243): false} {
		if _, err := tp.Expand(tool); (err == nil) != ok {
			t.Errorf("Expand(%q) = %v, want ok %v", clip(tool), err, ok)
		}
	}
	whole, _ := ParseTopic("{tool_name}")
	for _, tool := range []string{".", ".."} {
		if _, err := whole.Expand(tool); err == nil {
			t.Errorf("topic %q accepted", tool)
		}
	}
}

// TestSASLRedacted: printing a SASL config never shows the password.
func TestSASLRedacted(t *testing.T) {
	t.Parallel()
	s := &SASL{Mechanism: MechanismPlain, Username: "u", Password: "pw-9d1f"}
	for _, text := range []string{fmt.Sprint(s), fmt.Sprintf("%v %+v %#v %s", *s, s, *s, s), fmt.Sprintf("%+v", Config{SASL: s})} {
		if strings.Contains(text, "pw-9d1f") {
			t.Errorf("printed: %s", text)
		}
	}
}
