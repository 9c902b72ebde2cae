package natsjs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/nats-io/nats.go"
)

// TestUnreachable: a server that could not be reached (or did not answer
// in time) is waited for; one that answered and refused the client fails
// the start.
func TestUnreachable(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"no servers", fmt.Errorf("connect to nats: %w", nats.ErrNoServers), true},
		{"dial error", fmt.Errorf("connect to nats: %w", dial), true},
		{"timeout", nats.ErrTimeout, true},
		{"deadline", fmt.Errorf("list the streams: %w", context.DeadlineExceeded), true},
		{"cut in the handshake", io.EOF, true},
		{"authorization", fmt.Errorf("connect to nats: %w", nats.ErrAuthorization), false},
		{"TLS alert", &net.OpError{Op: "remote error", Err: tls.AlertError(42)}, false},
		{"certificate", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, false},
		{"stream missing", errors.New(`stream "X" does not exist`), false},
	} {
		if got := unreachable(tt.err); got != tt.want {
			t.Errorf("%s: unreachable(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}
