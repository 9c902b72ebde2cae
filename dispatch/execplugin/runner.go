package execplugin

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"
)

// ErrChecksumMismatch is returned (wrapped) when the executable's SHA-256
// differs from Config.SHA256; the executable was not run.
var ErrChecksumMismatch = plugin.ErrChecksumsDoNotMatch

// passedEnv lists the variables of drainer's environment a plugin gets,
// besides those starting with envPrefix.
var passedEnv = []string{
	"PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "TZ", "LANG", "LC_ALL", "LC_CTYPE",
	"SSL_CERT_FILE", "SSL_CERT_DIR",
	"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
}

// envPrefix marks variables meant for plugins.
const envPrefix = "DRAINER_PLUGIN_"

// pluginEnv returns the part of drainer's environment passed to plugins.
func pluginEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, envPrefix) || slices.Contains(passedEnv, name) {
			env = append(env, kv)
		}
	}
	return env
}

// newRunner is the adapter's go-plugin RunnerFunc: it completes the command
// go-plugin prepared (whose Env holds the handshake), verifies the
// executable's checksum, and returns a runner that has not started it yet.
//
// drainer runs plugins with its own runner rather than go-plugin's so that
// it can filter the plugin's standard error (see stderrFilter), give the
// plugin no stdin, run it in a process group of its own (see isolate), and
// know its exit status.
func (a *Adapter) newRunner(cmd *exec.Cmd) (*cmdRunner, error) {
	cmd.Path = a.cfg.Command
	cmd.Args = append([]string{a.cfg.Command}, a.cfg.Args...)
	// go-plugin's variables come last so that they win over inherited ones.
	cmd.Env = append(pluginEnv(), cmd.Env...)
	cmd.Stdin = nil
	isolate(cmd)
	if err := a.verify(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	return &cmdRunner{
		cmd:    cmd,
		path:   a.cfg.Command,
		done:   make(chan struct{}),
		stdout: stdout,
		stderr: &stderrFilter{r: bufio.NewReaderSize(stderr, 2*maxLogLine), c: stderr},
	}, nil
}

// verify checks the executable against Config.SHA256, with go-plugin's
// SecureConfig (a fresh one each time: it keeps the hash state).
func (a *Adapter) verify() error {
	if a.cfg.SHA256 == "" {
		return nil
	}
	want, _ := hex.DecodeString(a.cfg.SHA256) // checked by Validate
	sc := &plugin.SecureConfig{Checksum: want, Hash: sha256.New()}
	ok, err := sc.Check(a.cfg.Command)
	if err != nil {
		return fmt.Errorf("verify the sha256 of %s: %w", a.cfg.Command, err)
	}
	if !ok {
		return fmt.Errorf("%w: %s has sha256 %x, the config pins %s; refusing to run it",
			ErrChecksumMismatch, a.cfg.Command, sc.Hash.Sum(nil), a.cfg.SHA256)
	}
	return nil
}

// cmdRunner runs the plugin as a child process (go-plugin's runner.Runner).
type cmdRunner struct {
	cmd            *exec.Cmd
	path           string
	stdout, stderr io.ReadCloser
	pid            int

	done    chan struct{} // closed when Wait has returned
	mu      sync.Mutex
	waited  bool
	waitErr error
}

var _ runner.Runner = (*cmdRunner)(nil)

func (r *cmdRunner) Start(context.Context) error {
	if err := r.cmd.Start(); err != nil {
		if pe, ok := errors.AsType[*os.PathError](err); ok {
			err = pe.Err // "fork/exec PATH: ..." names the path again
		}
		return fmt.Errorf("run %s: %w", r.path, err)
	}
	r.pid = r.cmd.Process.Pid
	return nil
}

func (r *cmdRunner) Wait(context.Context) error {
	err := r.cmd.Wait()
	r.mu.Lock()
	r.waited, r.waitErr = true, err
	r.mu.Unlock()
	close(r.done)
	return err
}

// exitStatus describes how the process ended, e.g. "exit status 3" or
// "signal: killed"; "" while it runs.
func (r *cmdRunner) exitStatus() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case !r.waited:
		return ""
	case r.waitErr == nil:
		return "exit status 0"
	}
	return r.waitErr.Error()
}

// Kill kills the plugin and the helpers it started. Once the plugin has been
// reaped nothing is sent: its pid, and so its process group id, may belong to
// another process by then.
func (r *cmdRunner) Kill(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd.Process == nil || r.waited {
		return nil
	}
	return kill(r.cmd)
}

func (r *cmdRunner) Diagnose(context.Context) string {
	return "Is it a drainer adapter plugin? It must call sdk.Serve " +
		"(github.com/drainer-io/drainer/dispatch/execplugin/sdk) or speak go-plugin's gRPC handshake " +
		"with drainer's magic cookie (see dispatch/execplugin/proto/adapter.proto)."
}

func (r *cmdRunner) Stdout() io.ReadCloser { return r.stdout }
func (r *cmdRunner) Stderr() io.ReadCloser { return r.stderr }
func (r *cmdRunner) Name() string          { return r.path }

func (r *cmdRunner) ID() string {
	if r.pid == 0 {
		return ""
	}
	return strconv.Itoa(r.pid)
}

func (r *cmdRunner) PluginToHost(network, addr string) (string, string, error) {
	return network, addr, nil
}

func (r *cmdRunner) HostToPlugin(network, addr string) (string, string, error) {
	return network, addr, nil
}

// stderrFilter passes the plugin's standard error to go-plugin, which logs
// each line, parsing JSON lines as hclog entries. go-plugin asserts that a
// JSON line's "@message", "@level" and "@timestamp" are strings; a plugin
// printing, say, {"@message": 1} would panic drainer's log goroutine and take
// the daemon down. Such lines are prefixed with "[DEBUG] ", which makes them
// plain text. Lines longer than the buffer are passed through: go-plugin does
// not parse them either (its buffer, maxLogLine, is smaller).
type stderrFilter struct {
	r       *bufio.Reader
	c       io.Closer
	pending []byte
	long    bool // inside a line longer than the buffer
	err     error
}

func (f *stderrFilter) Read(p []byte) (int, error) {
	for len(f.pending) == 0 {
		if f.err != nil {
			return 0, f.err
		}
		chunk, err := f.r.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			f.long = true
		default:
			if !f.long {
				chunk = safeLogLine(chunk)
			}
			f.long = false
			f.err = err // nil, io.EOF or a read error, returned once pending is empty
		}
		f.pending = chunk // valid until the next ReadSlice, after it is consumed
	}
	n := copy(p, f.pending)
	f.pending = f.pending[n:]
	return n, nil
}

func (f *stderrFilter) Close() error { return f.c.Close() }

// hclogStringKeys are the keys go-plugin type-asserts to string.
var hclogStringKeys = []string{"@message", "@level", "@timestamp"}

func safeLogLine(line []byte) []byte {
	if !bytes.Contains(line, []byte(`"@`)) {
		return line
	}
	var entry map[string]any
	if json.Unmarshal(bytes.TrimRight(line, "\r\n"), &entry) != nil {
		return line // logged as text
	}
	for _, k := range hclogStringKeys {
		if v, ok := entry[k]; ok {
			if _, isString := v.(string); !isString {
				return append([]byte("[DEBUG] "), line...)
			}
		}
	}
	return line
}
