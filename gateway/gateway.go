package gateway

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/wire"
	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/netutil"
	"golang.org/x/sync/semaphore"
)

// DefaultWait bounds how long a call waits for its row to settle.
const DefaultWait = 30 * time.Second

// Path is where the gateway serves MCP.
const Path = "/mcp"

// The defaults of Config's bounds. A call waiting for its row is past its
// request's reading: ReadTimeout does not cut it off (net/http clears the
// read deadline once the body is read), and no WriteTimeout is set, since
// a call's answer comes up to its wait later (each call bounds itself).
const (
	DefaultMaxCalls = 256
	// OtherRequests is how many requests other than calls (initialize,
	// tools/list, ping, notifications) the gateway takes beside a full
	// MaxCalls by default (Config.MaxRequests).
	OtherRequests      = 64
	DefaultReadTimeout = 30 * time.Second
	DefaultIdleTimeout = 2 * time.Minute
)

// Config configures a Gateway.
type Config struct {
	// Addr is the listen address (host:port); Listener, when set, is used instead.
	Addr     string
	Listener net.Listener
	// Token, when set, is required of every request as
	// "Authorization: Bearer <token>". Off a loopback address it must be set
	// (New refuses otherwise).
	Token string
	// Wait bounds how long a call waits for its row to settle (0: DefaultWait).
	Wait time.Duration
	// AbortTool lists drainer_abort_run.
	AbortTool bool
	// MaxCalls bounds the tools/call requests in progress at once (0:
	// DefaultMaxCalls); one more is answered 503 at once, unrecorded.
	MaxCalls int
	// MaxRequests bounds the POSTs being read or served at once, calls
	// included (0: MaxCalls + OtherRequests): a request's body is read
	// only once it has one of these, so the bodies held stay within
	// MaxRequests times maxRequestBytes. One more is answered 503 at once.
	// The connections open at once are bounded too (maxConns); one more
	// waits to be accepted until one closes.
	MaxRequests int
	// ReadTimeout bounds the reading of one request, its body included
	// (0: DefaultReadTimeout); IdleTimeout bounds how long a kept-alive
	// connection waits for its next request (0: DefaultIdleTimeout).
	ReadTimeout time.Duration
	IdleTimeout time.Duration
	// DB and Store are the database the calls are recorded in.
	DB    *pgxpool.Pool
	Store *store.Store
	// Connect opens the settle listener's own connection (nil: one like
	// DB's, store.ConnectBeside).
	Connect func(ctx context.Context) (*pgx.Conn, error)
	// Tools are the tools listed and served.
	Tools []Tool
	// Lease, when set, runs lease for the engine of this process when it
	// has a worker slot free, and dispatches the row lease returns at once
	// (drainer.Engine.Lease): the gateway records each call and leases its
	// row in one transaction, so the call does not wait for a
	// notification and a claim. ran false: lease did not run (the call is
	// then recorded as any producer's intent); err is lease's.
	Lease func(ctx context.Context, lease func(ctx context.Context, c store.Claim) (*store.ClaimedRow, error)) (ran bool, err error)
	// Writing, when set, tells whether the engine of this process is
	// writing the completion of a row it leased (drainer.Engine.Writing):
	// a channel closed once the write ended and its news was told
	// (Gateway.Settled), nil when it is not writing it.
	Writing func(seq int64) <-chan struct{}
	// Admit, when set, lets a call passed straight through (a read-only
	// naturally idempotent tool) go out only as a row of its route would:
	// not while the route or its adapter is paused, and through the
	// adapter's breaker, rate limit and concurrency cap
	// (drainer.Engine.Admit). Admitted, done is called with the call's
	// result; refused, the call is answered with the error and not sent.
	Admit func(ctx context.Context, tool string) (done func(dispatch.Result), err error)
	// Routed, when set, says why a tool is not routed by the engine's
	// loaded config (nil: it is; drainer.Engine.Routed): a call of a tool
	// whose route a reload removed is refused before it is recorded, never
	// left pending for a route that will not come back.
	Routed func(tool string) error
	// Metrics are the series the gateway counts in (nil: its own,
	// registered on Registerer when that is set).
	Metrics    *Metrics
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	Version    string
}

// Gateway serves MCP on its listener until Shutdown.
type Gateway struct {
	cfg     Config
	log     *slog.Logger
	ln      net.Listener
	srv     *http.Server
	mcp     *sdk.Server
	watch   *settleWatch
	metrics *Metrics
	// token is the sha256 of the token required (nil: none), compared in
	// constant time; wait is how long a call waits for its row. Both are
	// the config's as loaded last (Reconfigure).
	token atomic.Pointer[[sha256.Size]byte]
	wait  atomic.Int64

	mu    sync.RWMutex
	tools map[string]*Tool
	// awaited holds the routed tools (tool → adapter) of servers that have
	// not answered tools/list yet (Await).
	awaited map[string]string

	stop context.CancelFunc
	done sync.WaitGroup
	// closing is closed by Shutdown: waiting calls are answered at once.
	closing   chan struct{}
	closeOnce sync.Once
	// slots holds a value per tools/call in progress, requests one per
	// POST being read or served (admit).
	slots, requests chan struct{}
	// base ends when Shutdown's grace does: every call under way ends
	// with it (callContext).
	base       context.Context
	cancelBase context.CancelFunc
	// sweep checks the pool's idle connections when one was lost (onLive).
	sweep sweeper
	// rec writes the records of calls arriving together in one
	// transaction (record.go).
	rec *recorder
	// answers bounds the large results being answered at once (budget.go).
	answers *semaphore.Weighted
	// recheck, when set (tests), replaces the period of a waiting call's
	// read (recheck).
	recheck time.Duration
}

// New checks cfg, takes its address and builds the server; Serve starts it.
func New(cfg Config) (*Gateway, error) {
	cfg.Wait = cmp.Or(cfg.Wait, DefaultWait)
	if cfg.Wait < 0 {
		return nil, fmt.Errorf("gateway.wait must be positive, got %s", cfg.Wait)
	}
	if cfg.MaxCalls < 0 || cfg.MaxRequests < 0 {
		return nil, fmt.Errorf("gateway: MaxCalls (%d) and MaxRequests (%d) must not be negative", cfg.MaxCalls, cfg.MaxRequests)
	}
	cfg.MaxCalls = cmp.Or(cfg.MaxCalls, DefaultMaxCalls)
	cfg.MaxRequests = cmp.Or(cfg.MaxRequests, cfg.MaxCalls+OtherRequests)
	if cfg.DB == nil || cfg.Store == nil {
		return nil, errors.New("gateway: no database")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln := cfg.Listener
	if ln == nil {
		if err := config.RequireGatewayToken(cfg.Addr, cfg.Token != ""); err != nil {
			return nil, err
		}
		var err error
		if ln, err = net.Listen("tcp", cfg.Addr); err != nil {
			return nil, fmt.Errorf("gateway: listen on %s: %w", cfg.Addr, err)
		}
	} else if err := config.RequireGatewayToken(ln.Addr().String(), cfg.Token != ""); err != nil {
		return nil, err
	}
	if cfg.Connect == nil {
		pool := cfg.DB
		cfg.Connect = func(ctx context.Context) (*pgx.Conn, error) { return store.ConnectBeside(ctx, pool, "gateway") }
	}
	ln = netutil.LimitListener(ln, maxConns(cfg.MaxRequests))
	g := &Gateway{cfg: cfg, log: log, ln: ln, tools: map[string]*Tool{}, closing: make(chan struct{}),
		slots: make(chan struct{}, cfg.MaxCalls), requests: make(chan struct{}, cfg.MaxRequests),
		answers: semaphore.NewWeighted(answerBudget)}
	g.base, g.cancelBase = context.WithCancel(context.Background())
	g.setToken(cfg.Token)
	g.wait.Store(int64(cfg.Wait))
	names := make([]string, 0, len(cfg.Tools)+1)
	for _, t := range cfg.Tools {
		names = append(names, t.Name)
	}
	if cfg.AbortTool {
		names = append(names, AbortToolName)
	}
	g.metrics = cfg.Metrics
	if g.metrics == nil {
		g.metrics = NewMetrics(cfg.Registerer, names)
	}
	g.watch = newSettleWatch(cfg.Connect, cfg.Store.SettleChannel(), log)
	g.watch.heard = g.metrics.heard.Inc
	g.rec = &recorder{write: func(ctx context.Context, reqs []store.LeaseRequest) (got []store.Leased, retried bool, err error) {
		retried, err = g.onLive(ctx, func(db store.DB) (err error) {
			got, err = g.cfg.Store.EnqueueLeasedBatch(ctx, db, reqs)
			return err
		})
		return got, retried, err
	}}
	g.mcp = sdk.NewServer(&sdk.Implementation{Name: "drainer-gateway", Version: cmp.Or(cfg.Version, "dev")},
		&sdk.ServerOptions{Capabilities: &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{ListChanged: true}}})
	if err := g.AddTools(cfg.Tools...); err != nil {
		_ = ln.Close()
		return nil, err
	}
	if cfg.AbortTool {
		g.addAbortTool()
	}
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return g.mcp },
		&sdk.StreamableHTTPOptions{Stateless: true, JSONResponse: true, MaxRequestBodyBytes: maxRequestBytes})
	mux := http.NewServeMux()
	mux.Handle(Path, g.authorize(g.admit(h)))
	g.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: cmp.Or(cfg.ReadTimeout, DefaultReadTimeout), IdleTimeout: cmp.Or(cfg.IdleTimeout, DefaultIdleTimeout),
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	return g, nil
}

// maxConns bounds the connections open at once: four per request taken
// at once, at least minConns, so that agents keeping their connections
// alive between calls are not turned away while the requests are bounded
// by maxRequests. Each costs its buffers and goroutine (tens of KiB).
func maxConns(maxRequests int) int { return max(minConns, 4*maxRequests) }

const minConns = 1024

// maxRequestBytes bounds one request's body: the payload limit of
// drainer.enqueue (1 MiB) and room for the envelope.
const maxRequestBytes = 1<<20 + 64<<10

// Addr is the address the gateway listens on.
func (g *Gateway) Addr() string { return g.ln.Addr().String() }

// URL is the gateway's MCP endpoint.
func (g *Gateway) URL() string { return "http://" + g.Addr() + Path }

// Serve starts the settle listener and the HTTP server; it returns once the
// listener listens (or ctx ends).
func (g *Gateway) Serve(ctx context.Context) error {
	wctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	g.stop = stop
	g.done.Add(2)
	go func() { defer g.done.Done(); g.watch.run(wctx) }()
	go func() {
		defer g.done.Done()
		if err := g.srv.Serve(g.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			g.log.Error("gateway: server stopped", "err", err)
		}
	}()
	select {
	case <-g.watch.listening:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(5 * time.Second):
		g.log.Warn("gateway: the settle listener is not listening yet; calls read their rows every " + recheck.String() + " until it is")
	}
	g.log.Info("gateway serving", "gateway_addr", g.Addr(), "tools", len(g.cfg.Tools), "token", g.token.Load() != nil, "wait", g.waitFor())
	return nil
}

// Shutdown stops taking calls, lets the calls under way end (within ctx),
// and stops the listener. Calls waiting for their rows are answered at
// once; a call still under way when ctx ends (a read the database does not
// answer, say) is ended then, answered with its row's state as last read.
// A call cut off by it has its row recorded: its retry is answered from it,
// isClosing reports whether Shutdown has begun.
func (g *Gateway) isClosing() bool {
	select {
	case <-g.closing:
		return true
	default:
		return false
	}
}

// and the engine sends it as any row.
func (g *Gateway) Shutdown(ctx context.Context) error {
	g.closeOnce.Do(func() { close(g.closing) })
	err := g.srv.Shutdown(ctx)
	g.cancelBase()
	if err != nil {
		g.drain()
	}
	if g.stop != nil {
		g.stop()
	}
	g.done.Wait()
	return err
}

// authorize requires the bearer token, when there is one, compared in
// constant time; a request without it is answered 401 and nothing of it is
// recorded or sent.
func (g *Gateway) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if want := g.token.Load(); want != nil {
			got, ok := wire.BearerToken(r.Header.Get("Authorization"))
			sum := sha256.Sum256([]byte(got))
			if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
				g.metrics.calls.WithLabelValues("", string(OutcomeRefused)).Inc()
				w.Header().Set("WWW-Authenticate", `Bearer realm="drainer gateway"`)
				http.Error(w, "drainer gateway: a bearer token is required (Authorization: Bearer <gateway.token>)", http.StatusUnauthorized)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// setToken makes token the one required (none when empty).
func (g *Gateway) setToken(token string) {
	if token == "" {
		g.token.Store(nil)
		return
	}
	sum := sha256.Sum256([]byte(token))
	g.token.Store(&sum)
}

// waitFor is how long a call waits for its row now.
func (g *Gateway) waitFor() time.Duration { return time.Duration(g.wait.Load()) }

// Reconfigure applies a reloaded config's token and wait (0: the
// default) to the calls that arrive from now on: a token rotated or
// revoked by a reload is the only one accepted once Reconfigure returns.
// A token the gateway's address requires and the config no longer gives is
// refused, and nothing changes.
func (g *Gateway) Reconfigure(token string, wait time.Duration) error {
	wait = cmp.Or(wait, DefaultWait)
	if wait < 0 {
		return fmt.Errorf("gateway.wait must be positive, got %s", wait)
	}
	if err := config.RequireGatewayToken(g.Addr(), token != ""); err != nil {
		return err
	}
	g.setToken(token)
	g.wait.Store(int64(wait))
	return nil
}
