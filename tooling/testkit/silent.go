package testkit

import (
	"net"
	"sync"
	"testing"
)

// Silent is a TCP server that accepts connections and never answers: a
// half-dead proxy, or a partition that drops packets, as a client sees it.
type Silent struct {
	Port int

	mu   sync.Mutex
	held []net.Conn
}

// NewSilent starts a Silent on a free loopback port; it stops with t.
func NewSilent(t testing.TB) *Silent {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Silent{Port: ln.Addr().(*net.TCPAddr).Port}
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range s.held {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.held = append(s.held, c) // accepted, never answered
			s.mu.Unlock()
		}
	}()
	return s
}

// Accepted is how many connections s has accepted.
func (s *Silent) Accepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}
