package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/execplugin/sdk"
)

// version is set with -ldflags "-X main.version=...".
var version = "dev"

// record is one line of the output file.
type record struct {
	Key      string          `json:"key"`
	ToolName string          `json:"tool_name"`
	Kind     string          `json:"kind"`
	Seq      int64           `json:"seq"`
	Attempt  int             `json:"attempt"`
	Tag      string          `json:"tag,omitempty"`
	Payload  json.RawMessage `json:"payload"`
}

// delivered is what the plugin remembers of a key.
type delivered struct {
	line int // 1-based line in the output file
	sum  [sha256.Size]byte
}

type echo struct {
	out, faults, tag string

	mu   sync.Mutex
	seen map[string]delivered
	n    int // lines in the output file
}

func main() {
	log := sdk.Logger()
	out := flag.String("out", os.Getenv("DRAINER_PLUGIN_ECHO_OUT"), "the `file` deliveries are appended to (JSON lines)")
	tag := flag.String("tag", "", "a `text` stored in every record")
	faults := flag.String("faults", "", "a `file` of faults to inject, one per line, consumed one per dispatch")
	keyTTL := flag.Duration("key-ttl", -1, "the idempotency `window` to report to drainer (0: unlimited); none when unset")
	started := flag.String("started", "", "a `file` the plugin appends its pid to when it starts")
	flag.Parse()
	if *started != "" {
		if err := appendLine(*started, []byte(strconv.Itoa(os.Getpid()))); err != nil {
			log.Error("cannot write the start marker", "err", err)
			os.Exit(1)
		}
	}
	if *out == "" {
		log.Error("--out (or DRAINER_PLUGIN_ECHO_OUT) is required")
		os.Exit(2)
	}
	e, err := load(*out)
	if err != nil {
		log.Error("cannot read the output file", "err", err)
		os.Exit(1)
	}
	e.faults, e.tag = *faults, *tag
	log.Info("plugin-echo ready", "out", *out, "keys", len(e.seen))
	info := sdk.Info{Name: "plugin-echo", Version: version}
	if *keyTTL >= 0 {
		sdk.Serve(withKeyTTL{e, *keyTTL}, info)
	} else {
		sdk.Serve(e, info)
	}
}

// load reads the keys already delivered to out.
func load(out string) (*echo, error) {
	e := &echo{out: out, seen: map[string]delivered{}}
	f, err := os.Open(out)
	if errors.Is(err, os.ErrNotExist) {
		return e, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		e.n++
		var rec record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", out, e.n, err)
		}
		if _, dup := e.seen[rec.Key]; !dup {
			e.seen[rec.Key] = delivered{line: e.n, sum: payloadSum(rec.Payload)}
		}
	}
	return e, sc.Err()
}

// payloadSum identifies a payload regardless of insignificant white space.
func payloadSum(p json.RawMessage) [sha256.Size]byte {
	var buf bytes.Buffer
	if json.Compact(&buf, p) != nil {
		return sha256.Sum256(p)
	}
	return sha256.Sum256(buf.Bytes())
}

func (e *echo) Dispatch(ctx context.Context, m *dispatch.Message) dispatch.Result {
	fault, err := e.nextFault()
	if err != nil {
		return dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Reason: "fault_file", Err: err}
	}
	if fault == "" {
		var p struct{ Fail string }
		if json.Unmarshal(m.Payload, &p) == nil {
			fault = p.Fail
		}
	}
	switch fault {
	case "transient":
		return dispatch.Result{Outcome: dispatch.Retry, Status: 503, Reason: "echo_transient", Err: errors.New("transient failure requested")}
	case "terminal":
		return dispatch.Result{Outcome: dispatch.Terminal, Status: 422, Reason: "echo_terminal", Err: errors.New("terminal failure requested")}
	case "hang":
		<-ctx.Done()
		return dispatch.Result{Outcome: dispatch.Ambiguous, Reason: "timeout", Err: ctx.Err()}
	case "crash":
		os.Exit(3)
	}
	return e.deliver(m)
}

func (e *echo) deliver(m *dispatch.Message) dispatch.Result {
	sum := payloadSum(m.Payload)
	e.mu.Lock()
	defer e.mu.Unlock()
	if d, ok := e.seen[m.Key]; ok {
		if d.sum != sum {
			return dispatch.Result{Outcome: dispatch.Terminal, Status: 409, Reason: "payload_mismatch",
				Err: errors.New("key already delivered with another payload")}
		}
		return dispatch.Result{Outcome: dispatch.Replay, Status: 200, Reason: "replay", Response: response(d.line)}
	}
	line, err := json.Marshal(record{Key: m.Key, ToolName: m.Tuple.ToolName, Kind: string(m.Kind), Seq: m.Seq,
		Attempt: m.Attempt, Tag: e.tag, Payload: m.Payload})
	if err != nil { // the payload is not valid JSON
		return dispatch.Result{Outcome: dispatch.Terminal, NotSent: true, Reason: "invalid_payload",
			Err: errors.New("payload is not valid JSON")}
	}
	if err := appendLine(e.out, line); err != nil {
		// A partial line may have been written: nobody knows.
		return dispatch.Result{Outcome: dispatch.Ambiguous, Reason: "write_failed", Err: err}
	}
	e.n++
	e.seen[m.Key] = delivered{line: e.n, sum: sum}
	return dispatch.Result{Outcome: dispatch.Success, Status: 200, Reason: "delivered", Response: response(e.n)}
}

// withKeyTTL reports a key TTL: the sdk finds dispatch.KeyTTLer by type
// assertion.
type withKeyTTL struct {
	*echo
	ttl time.Duration
}

func (w withKeyTTL) KeyTTL(context.Context) (time.Duration, error) { return w.ttl, nil }

func response(line int) json.RawMessage {
	return json.RawMessage(`{"delivered":true,"line":` + strconv.Itoa(line) + `}`)
}

// nextFault pops the first line of the faults file, if any.
func (e *echo) nextFault() (string, error) {
	if e.faults == "" {
		return "", nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	b, err := os.ReadFile(e.faults)
	if errors.Is(err, os.ErrNotExist) || len(b) == 0 {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	first, rest, _ := strings.Cut(string(b), "\n")
	if err := writeAtomic(e.faults, []byte(rest)); err != nil {
		return "", err
	}
	return strings.TrimSpace(first), nil
}

func appendLine(path string, line []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func writeAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".faults-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
