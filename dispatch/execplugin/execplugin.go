package execplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/execplugin/internal/wire"
	pluginpb "github.com/drainer-io/drainer/dispatch/execplugin/proto"
)

// ErrKeyTTLNotReported is returned by KeyTTL when the plugin does not report
// its provider's idempotency window: use the adapter type's default.
var ErrKeyTTLNotReported = errors.New("the plugin does not report a key_ttl")

// errClosed is the cause of dispatches after Close.
var errClosed = errors.New("plugin adapter closed")

// Restart backoff: consecutive crashes or failed starts after the first wait
// restartBackoffBase, doubling up to restartBackoffCap.
const (
	restartBackoffBase = 100 * time.Millisecond
	restartBackoffCap  = 30 * time.Second
)

// restartDelay is the wait before the next start after failures consecutive
// crashes or failed starts: none after the first.
func restartDelay(failures int) time.Duration {
	if failures <= 1 {
		return 0
	}
	return min(restartBackoffCap, restartBackoffBase<<min(failures-2, 20))
}

// Adapter delivers rows through a plugin process. It is safe for concurrent
// use; all calls share the process's gRPC connection.
type Adapter struct {
	cfg    Config
	log    *slog.Logger
	hclog  hclog.Logger
	tmpDir string // the plugin's unix sockets live here

	// closeCtx is cancelled by Close; it aborts starts under way.
	closeCtx  context.Context
	cancel    context.CancelFunc
	closeOnce sync.Once
	// wg tracks background starts and kills, waited for by Close.
	wg sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	cur      *process      // the running process; nil when there is none
	starting chan struct{} // closed when the start under way ends; nil if none
	failures int           // consecutive crashes and failed starts
	notUntil time.Time     // no start before this
	lastErr  error         // why there is no process
	restarts int
}

var (
	_ dispatch.Adapter  = (*Adapter)(nil)
	_ dispatch.KeyTTLer = (*Adapter)(nil)
)

// process is one running plugin process.
type process struct {
	client *plugin.Client
	runner *cmdRunner
	*wire.Client
	info *pluginpb.InfoResponse
}

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.Exited:
		return true
	default:
		return false
	}
}

// waitExit reports whether the process exits within grace (or before ctx is
// done).
func (p *process) waitExit(ctx context.Context, grace time.Duration) bool {
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.Exited:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return p.exited()
}

func (p *process) pid() int { return p.runner.pid }

// New validates cfg (after WithDefaults), starts the plugin and checks that
// it speaks drainer's protocol. Errors name the executable's path, never an
// argument. ctx bounds the start, as does cfg.StartTimeout.
//
// The plugin's log lines are logged to cfg.Logger: JSON lines in go-plugin's
// format at their own level (see sdk.Logger), other standard error lines at
// info, its standard output at debug.
func New(ctx context.Context, cfg Config) (*Adapter, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkCommand(cfg.Command); err != nil {
		return nil, fmt.Errorf("command: %w", err)
	}
	tmpDir, err := os.MkdirTemp("", "drainer-plugin-")
	if err != nil {
		return nil, fmt.Errorf("plugin socket directory: %w", err)
	}
	a := &Adapter{
		cfg:    cfg,
		log:    cfg.Logger,
		hclog:  newHCLogAdapter(cfg.Logger).Named("go-plugin"),
		tmpDir: tmpDir,
	}
	a.closeCtx, a.cancel = context.WithCancel(context.Background())
	p, err := a.launch(ctx)
	if err != nil {
		a.cancel()
		_ = os.RemoveAll(tmpDir)
		return nil, err
	}
	a.cur = p
	a.log.Info("plugin started", "command", cfg.Command, "pid", p.pid(),
		"plugin", p.info.GetName(), "plugin_version", p.info.GetVersion())
	return a, nil
}

// launch starts a plugin process and checks its Info. ctx bounds the whole
// start; the handshake is bounded by cfg.StartTimeout too.
func (a *Adapter) launch(ctx context.Context) (_ *process, err error) {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.StartTimeout)
	defer cancel()
	startTimeout := a.cfg.StartTimeout
	if dl, ok := ctx.Deadline(); ok {
		startTimeout = time.Until(dl)
	}
	if err := ctx.Err(); err != nil || startTimeout <= 0 {
		return nil, fmt.Errorf("start plugin %s: %w", a.cfg.Command, context.Cause(ctx))
	}
	p := &process{}
	p.client = plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig: wire.Handshake,
		Plugins:         plugin.PluginSet{wire.PluginName: &wire.GRPCPlugin{}},
		RunnerFunc: func(_ hclog.Logger, cmd *exec.Cmd, _ string) (runner.Runner, error) {
			r, err := a.newRunner(cmd)
			if err != nil {
				return nil, err
			}
			p.runner = r
			return r, nil
		},
		AllowedProtocols:    []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:            true,
		SkipHostEnv:         true, // see pluginEnv
		StartTimeout:        startTimeout,
		Logger:              a.hclog,
		PluginLogBufferSize: maxLogLine,
		UnixSocketConfig:    &plugin.UnixSocketConfig{TempDir: a.tmpDir},
		SyncStdout:          &lineLogger{log: a.log, level: slog.LevelDebug, source: "plugin.stdout"},
		SyncStderr:          &lineLogger{log: a.log, level: slog.LevelInfo, source: "plugin.stderr"},
	})
	defer func() {
		if err != nil {
			p.client.Kill() // reaps the process and go-plugin's goroutines
		}
	}()
	rpc, err := p.client.Client()
	if err != nil {
		return nil, a.startError(p, err)
	}
	raw, err := rpc.Dispense(wire.PluginName)
	if err != nil {
		return nil, fmt.Errorf("start plugin %s: %w", a.cfg.Command, err)
	}
	p.Client = raw.(*wire.Client)
	info, err := p.Info(ctx, &pluginpb.InfoRequest{})
	if err != nil {
		return nil, fmt.Errorf("start plugin %s: Info: %s", a.cfg.Command, statusText(err))
	}
	if v := info.GetProtocolVersion(); v != wire.ProtocolVersion {
		return nil, fmt.Errorf("start plugin %s: it speaks drainer plugin protocol version %d, this drainer speaks %d",
			a.cfg.Command, v, wire.ProtocolVersion)
	}
	p.info = info
	return p, nil
}

// startError words an error of go-plugin's start for an operator: go-plugin's
// handshake errors span several lines.
func (a *Adapter) startError(p *process, err error) error {
	if errors.Is(err, ErrChecksumMismatch) {
		return err
	}
	msg := strings.Join(strings.Fields(err.Error()), " ")
	if p.runner != nil && (strings.Contains(msg, "Unrecognized remote plugin message") ||
		strings.Contains(msg, "exited before we could connect")) {
		exit := ""
		select {
		case <-p.runner.done:
			exit = " (" + p.runner.exitStatus() + ")"
		case <-time.After(100 * time.Millisecond):
		}
		return fmt.Errorf("start plugin %s: it did not complete drainer's plugin handshake%s: %s",
			a.cfg.Command, exit, msg)
	}
	return fmt.Errorf("start plugin %s: %s", a.cfg.Command, msg)
}

// Dispatch sends m to the plugin and returns its answer; see the package
// documentation for the classification of failures.
func (a *Adapter) Dispatch(ctx context.Context, m *dispatch.Message) dispatch.Result {
	if ctx.Err() != nil { // shutdown: do not even start a plugin
		return notRunning(ctx, 0, context.Cause(ctx))
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	req, err := request(ctx, m)
	if err != nil {
		// Nothing reached the plugin: the row fails without consuming an
		// attempt.
		return dispatch.Result{Outcome: dispatch.Terminal, NotSent: true, Reason: dispatch.ReasonUnsendable, Err: err}
	}
	p, retryAfter, err := a.process(ctx)
	if err != nil {
		return notRunning(ctx, retryAfter, err)
	}
	resp, err := p.Dispatch(ctx, req)
	if err != nil {
		return a.callFailed(ctx, p, err)
	}
	a.succeeded()
	return result(resp)
}

// KeyTTL asks the plugin for its provider's idempotency window: 0 means
// unlimited, ErrKeyTTLNotReported that the plugin does not know it.
func (a *Adapter) KeyTTL(ctx context.Context) (time.Duration, error) {
	p, _, err := a.process(ctx)
	if err != nil {
		return 0, err
	}
	resp, err := p.KeyTTL(ctx, &pluginpb.KeyTTLRequest{})
	switch {
	case status.Code(err) == codes.Unimplemented:
		return 0, ErrKeyTTLNotReported
	case err != nil:
		return 0, fmt.Errorf("plugin KeyTTL: %s", statusText(err))
	case resp.TtlMs == nil:
		return 0, ErrKeyTTLNotReported
	case *resp.TtlMs < 0:
		return 0, fmt.Errorf("plugin KeyTTL: negative ttl_ms %d", *resp.TtlMs)
	}
	return millis(*resp.TtlMs), nil
}

// Close stops the plugin process (gracefully, then by force after 2s) and
// waits for a start under way. Dispatches in flight end Ambiguous; later
// ones return Retry with NotSent. Close is idempotent and always returns nil.
func (a *Adapter) Close() error {
	a.closeOnce.Do(func() {
		a.mu.Lock()
		a.closed = true
		p := a.cur
		a.cur = nil
		a.mu.Unlock()
		a.cancel()
		if p != nil {
			p.client.Kill()
			a.log.Debug("plugin stopped", "pid", p.pid())
		}
		a.wg.Wait()
		_ = os.RemoveAll(a.tmpDir)
	})
	return nil
}

// process returns the running process, starting one if there is none (and
// the restart backoff allows it). On error, retryAfter is the rest of the
// backoff.
func (a *Adapter) process(ctx context.Context) (p *process, retryAfter time.Duration, err error) {
	waited := false
	for {
		a.mu.Lock()
		if a.closed {
			a.mu.Unlock()
			return nil, 0, errClosed
		}
		if p := a.cur; p != nil {
			if !p.exited() {
				a.mu.Unlock()
				return p, 0, nil
			}
			a.retireLocked(p, fmt.Errorf("plugin process exited (%s)", p.runner.exitStatus()))
		}
		if a.starting == nil {
			wait := time.Until(a.notUntil)
			if waited || wait > 0 {
				err := a.lastErr
				a.mu.Unlock()
				if err == nil {
					err = errors.New("plugin not running")
				}
				return nil, max(wait, 0), err
			}
			a.startLocked()
		}
		ch := a.starting
		a.mu.Unlock()
		select {
		case <-ch:
			waited = true
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("plugin still starting: %w", context.Cause(ctx))
		}
	}
}

// retireLocked drops p, the current process, because of cause, kills it in
// the background and counts a failure for the restart backoff.
func (a *Adapter) retireLocked(p *process, cause error) {
	a.cur = nil
	a.failures++
	a.lastErr = cause
	delay := restartDelay(a.failures)
	a.notUntil = time.Now().Add(delay)
	a.log.Warn("plugin process lost; it is started again on the next dispatch",
		"pid", p.pid(), "cause", cause, "restart_in", delay, "consecutive_failures", a.failures)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		// No graceful stop: the process is dead or unreachable.
		_ = p.runner.Kill(context.Background())
		p.client.Kill()
	}()
}

// retire retires p if it is still the current process.
func (a *Adapter) retire(p *process, cause error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cur == p && !a.closed {
		a.retireLocked(p, cause)
	}
}

// startLocked starts a process in the background; a.starting is closed when
// the attempt ends.
func (a *Adapter) startLocked() {
	done := make(chan struct{})
	a.starting = done
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer close(done)
		p, err := a.launch(a.closeCtx)
		a.mu.Lock()
		a.starting = nil
		closed := a.closed
		switch {
		case err != nil:
			a.failures++
			a.lastErr = err
			delay := restartDelay(a.failures)
			a.notUntil = time.Now().Add(delay)
			if !closed {
				a.log.Error("plugin could not be started; dispatches are retried later", "err", err,
					"retry_in", delay, "consecutive_failures", a.failures)
			}
		case !closed:
			a.cur = p
			a.lastErr = nil
			a.restarts++
			a.log.Info("plugin restarted", "pid", p.pid(), "restarts", a.restarts,
				"plugin", p.info.GetName(), "plugin_version", p.info.GetVersion())
		}
		a.mu.Unlock()
		if err == nil && closed {
			p.client.Kill()
		}
	}()
}

// succeeded resets the restart backoff after a call the plugin answered.
func (a *Adapter) succeeded() {
	a.mu.Lock()
	a.failures = 0
	a.mu.Unlock()
}

// pid returns the process id of the running plugin, or 0.
func (a *Adapter) pid() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cur == nil {
		return 0
	}
	return a.cur.pid()
}
