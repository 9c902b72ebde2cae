package kafka

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/drainer-io/drainer/dispatch/wire"
)

// Defaults applied by Config.WithDefaults.
const (
	// DefaultTimeout bounds one attempt when Config.Timeout is zero.
	DefaultTimeout = 10 * time.Second
	// DefaultClientID is the client id brokers see in their logs and quotas.
	DefaultClientID = "drainer"
	// DefaultKeyTTL is the adapter type's key_ttl when the config leaves it
	// unset: Kafka keeps no idempotency window of its own across producer
	// sessions (consumers deduplicate on the Idempotency-Key header), so it
	// is the default log retention (retention.ms = 7 days), the span in
	// which a consumer can still meet an earlier copy.
	DefaultKeyTTL = 7 * 24 * time.Hour
)

// SASL mechanisms of SASL.Mechanism.
const (
	MechanismPlain       = "PLAIN"
	MechanismSCRAMSHA256 = "SCRAM-SHA-256"
	MechanismSCRAMSHA512 = "SCRAM-SHA-512"
)

// Mechanisms lists the SASL mechanisms the adapter speaks.
func Mechanisms() []string {
	return []string{MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512}
}

// Config configures one kafka adapter instance.
type Config struct {
	// Brokers are the seed brokers, host:port each; an entry may hold a
	// comma-separated list (one ${env:} variable for all of them).
	Brokers []string
	// Topic is the topic records go to: a name, or a template where
	// {tool_name} stands for the row's tool name.
	Topic string
	// TLS, when not nil, connects with TLS (the system roots when CAFile
	// is empty).
	TLS *TLS
	// SASL, when not nil, authenticates with SASL.
	SASL *SASL
	// Timeout bounds one attempt: the wait for the acknowledgement.
	Timeout time.Duration
	// ClientID is the Kafka client id; "" means DefaultClientID.
	ClientID string
	// Logger receives the client's warnings and errors (connections lost,
	// authentication refused), and all it logs when its debug level is on;
	// nil discards them.
	Logger *slog.Logger
}

// TLS configures the connection's TLS.
type TLS struct {
	// CAFile is a PEM file of the CAs that sign the brokers' certificates;
	// "" means the system roots.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// brokers that require client authentication; both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName overrides the host name the brokers' certificates are
	// checked against.
	ServerName string `yaml:"server_name"`
}

// SASL configures SASL authentication. The password is only ever sent on
// the wire: errors and logs never show it.
type SASL struct {
	// Mechanism is one of Mechanisms().
	Mechanism string `yaml:"mechanism"`
	Username  string `yaml:"username"`
	// Password must come from ${env:NAME} or ${file:/path}.
	Password string `yaml:"password" secret:"reference"`
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	c.ClientID = cmp.Or(c.ClientID, DefaultClientID)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// SeedBrokers returns the brokers, comma-separated entries split and
// blanks trimmed.
func (c Config) SeedBrokers() []string {
	var out []string
	for _, b := range c.Brokers {
		for s := range strings.SplitSeq(b, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

// Validate reports every problem of c at once, each naming its field: the
// rules of the config file's keys (Settings.Check) and of the runtime
// fields. A broker is only quoted when it is not an address (a broker
// address is not a secret; a mistyped one is easier to fix seen).
func (c Config) Validate() error {
	ch := wire.NewChecker(nil)
	(&Settings{Brokers: c.Brokers, Topic: c.Topic, TLS: c.TLS, SASL: c.SASL}).Check(ch)
	if c.Timeout <= 0 {
		ch.Errorf("timeout", "must be positive, got %s", c.Timeout)
	}
	return ch.Errs.Err()
}

// CheckBroker checks one seed broker address: host:port, without a scheme.
func CheckBroker(b string) error {
	if strings.Contains(b, "://") {
		return errors.New("a broker is host:port, without a scheme (TLS is configured under tls)")
	}
	host, port, err := net.SplitHostPort(b)
	if err != nil || host == "" {
		return fmt.Errorf("must be host:port, got %q", clip(b))
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port must be 1-65535, got %q", clip(port))
	}
	return nil
}

// Config builds the TLS configuration: TLS 1.2 or later, the CA file's
// roots (else the system's), the client certificate when given. Errors name
// the field and the file, never a file's content.
func (t *TLS) Config() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	var errs []error
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("tls.ca_file: %w", err))
		default:
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				errs = append(errs, fmt.Errorf("tls.ca_file: no PEM certificate found in %s", t.CAFile))
			}
			cfg.RootCAs = pool
		}
	}
	switch {
	case t.CertFile != "" && t.KeyFile != "":
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("tls.cert_file, tls.key_file: cannot load the client certificate (%s, %s): %w", t.CertFile, t.KeyFile, redactKeyErr(err)))
		} else {
			cfg.Certificates = []tls.Certificate{cert}
		}
	case t.CertFile != "" || t.KeyFile != "":
		errs = append(errs, errors.New("tls: cert_file and key_file go together (a client certificate and its key)"))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return cfg, nil
}

// redactKeyErr keeps the error of loading a key pair short: the standard
// library's errors describe the files' structure, never their bytes, but
// they can be long.
func redactKeyErr(err error) error {
	var pathErr *os.PathError
	if errors.As(err, &pathErr) {
		return pathErr
	}
	return errors.New(strings.TrimPrefix(err.Error(), "tls: "))
}

// String shows the mechanism and the user, never the password.
func (s SASL) String() string { return s.Mechanism + " as " + s.Username + " (password redacted)" }

// GoString hides the password from %#v.
func (s SASL) GoString() string { return s.String() }
