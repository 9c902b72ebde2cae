package natsjs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch/natsjs/natsjstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
)

// Where the tests find a JetStream server: DRAINER_TEST_NATS_URL if set
// ("inprocess" forces an embedded server), else the server the build
// machines run on 127.0.0.1:4222 if it answers with JetStream, else a
// server started in this process.
const (
	envNATSURL   = "DRAINER_TEST_NATS_URL"
	localNATSURL = "nats://127.0.0.1:4222"
	inProcess    = "inprocess"
)

// shared is the server the package's tests share, chosen on first use.
var shared struct {
	once sync.Once
	url  string
	desc string
	stop func() // nil for an external server
	err  error
}

// TestMain stops the shared in-process server, if one was started, and then
// fails the package if goroutines are left.
func TestMain(m *testing.M) {
	code := m.Run()
	if shared.stop != nil {
		shared.stop()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "natsjs: goroutines leaked after all tests passed: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// sharedServer returns the URL of the shared server, choosing it on the
// first call and logging which one it is.
func sharedServer(t testing.TB) string {
	t.Helper()
	first := false
	shared.once.Do(func() {
		first = true
		shared.url, shared.desc, shared.stop, shared.err = chooseServer()
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	if first {
		t.Logf("natsjs tests: using %s", shared.desc)
	}
	return shared.url
}

func chooseServer() (url, desc string, stop func(), err error) {
	switch env := os.Getenv(envNATSURL); env {
	case inProcess:
		return natsjstest.Start()
	case "":
		if probe(localNATSURL) == nil {
			return localNATSURL, "the JetStream server on " + localNATSURL, nil, nil
		}
		url, desc, stop, err = natsjstest.Start()
		return url, desc + " (nothing answered on " + localNATSURL + ")", stop, err
	default:
		if err := probe(env); err != nil {
			return "", "", nil, fmt.Errorf("%s is set, but no JetStream server answers there: %w", envNATSURL, err)
		}
		return env, "the JetStream server at $" + envNATSURL, nil, nil
	}
}

// probe checks that a JetStream server answers at url.
func probe(url string) error {
	nc, err := nats.Connect(url, nats.Timeout(time.Second), nats.MaxReconnects(0))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err
}

// natsEnv gives a test its own subjects and streams on a server, removed
// when the test ends.
type natsEnv struct {
	url    string
	nc     *nats.Conn
	js     jetstream.JetStream
	prefix string // unique first tokens of every subject the test uses
	name   string // unique stream name prefix
}

func newNATSEnv(t testing.TB, url string) *natsEnv {
	t.Helper()
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	return &natsEnv{url: url, nc: nc, js: js, prefix: "drainer_test." + id, name: "DRAINER_TEST_" + strings.ToUpper(id)}
}

// streamSpec describes a test stream; zero fields take test defaults.
type streamSpec struct {
	name       string // appended to the env's name prefix
	subjects   []string
	duplicates time.Duration
	maxMsgSize int32
	maxMsgs    int64 // with DiscardNew: a full stream refuses new messages
	file       bool  // file storage (default memory)
}

// createStream creates a stream, deleted when t ends, and returns its name.
// MaxAge bounds what a failed cleanup could leave on a shared server.
func (e *natsEnv) createStream(t testing.TB, s streamSpec) string {
	t.Helper()
	name := e.name + s.name
	cfg := jetstream.StreamConfig{
		Name: name, Subjects: s.subjects, Storage: jetstream.MemoryStorage,
		Duplicates: s.duplicates, MaxAge: max(10*time.Minute, s.duplicates), MaxMsgSize: s.maxMsgSize,
	}
	if s.file {
		cfg.Storage = jetstream.FileStorage
	}
	if s.maxMsgs > 0 {
		cfg.MaxMsgs, cfg.Discard = s.maxMsgs, jetstream.DiscardNew
	}
	if cfg.MaxMsgSize == 0 {
		cfg.MaxMsgSize = -1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.js.CreateStream(ctx, cfg); err != nil {
		t.Fatalf("create stream %s: %v", name, err)
	}
	t.Cleanup(func() { e.deleteStream(t, name) })
	return name
}

func (e *natsEnv) deleteStream(t testing.TB, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.js.DeleteStream(ctx, name); err != nil && !strings.Contains(err.Error(), "not found") {
		t.Errorf("delete stream %s: %v", name, err)
	}
}

// messages returns the messages of stream that carry Nats-Msg-Id key.
func (e *natsEnv) messages(t testing.TB, stream, key string) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := e.js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	state := s.CachedInfo().State
	var found []*jetstream.RawStreamMsg
	for seq := state.FirstSeq; state.Msgs > 0 && seq <= state.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted
		}
		if m.Header.Get(jetstream.MsgIDHeader) == key {
			found = append(found, m)
		}
	}
	return found
}
