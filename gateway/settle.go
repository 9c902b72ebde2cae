package gateway

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5"
)

// settleWatch tells the calls waiting for a key that its row may have
// settled. One connection LISTENs on the settle channel (store.SettleChannel),
// where each completion announces the keys of the rows it settled. A call
// registers its key before it reads the row, so an announcement between the
// read and the wait is not lost. The connection is re-established when it
// dies (a restart, an idle-connection killer, a network drop), and every
// waiting call is woken then to read its row again: whatever was announced
// while nobody listened is found that way. Each waiting call also reads its
// row again every recheck, for rows settled by someone who does not
// announce (an operator's cancel or resolve, an abort of the run).
type settleWatch struct {
	connect func(ctx context.Context) (*pgx.Conn, error)
	channel string
	log     *slog.Logger
	// heard, when set, is called for each notification received.
	heard func()

	mu      sync.Mutex
	waiters map[string]map[chan *store.Call]struct{}
	// listening is closed once the first LISTEN took effect; listens
	// counts the LISTENs that did (each after the waiters were woken).
	listening chan struct{}
	listens   int
}

// recheck is how often a waiting call reads its row again without an
// announcement.
const recheck = 2 * time.Second

func newSettleWatch(connect func(context.Context) (*pgx.Conn, error), channel string, log *slog.Logger) *settleWatch {
	return &settleWatch{connect: connect, channel: channel, log: log,
		waiters: map[string]map[chan *store.Call]struct{}{}, listening: make(chan struct{})}
}

// watch registers interest in key: ch receives a value (without blocking
// the watch) whenever key may have settled: the row's state when the
// news carries it (a success with its record, settled in this process),
// nil otherwise (read the row). cancel removes it.
func (w *settleWatch) watch(key string) (ch chan *store.Call, cancel func()) {
	ch = make(chan *store.Call, 1)
	w.mu.Lock()
	set := w.waiters[key]
	if set == nil {
		set = map[chan *store.Call]struct{}{}
		w.waiters[key] = set
	}
	set[ch] = struct{}{}
	w.mu.Unlock()
	return ch, func() {
		w.mu.Lock()
		delete(w.waiters[key], ch)
		if len(w.waiters[key]) == 0 {
			delete(w.waiters, key)
		}
		w.mu.Unlock()
	}
}

// wake tells the waiters of key (every waiter when key is "") that its
// row may have settled; c, when not nil, is the state it settled in.
func (w *settleWatch) wake(key string, c *store.Call) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if key != "" {
		notify(w.waiters[key], c)
		return
	}
	for _, set := range w.waiters {
		notify(set, nil)
	}
}

// notify tells each waiter of set, without blocking. A waiter already
// told and not yet woken gets the state c instead of a bare wake-up it
// holds (the settle notification often comes just before the news of
// this process's engine): it answers without reading its row.
func notify(set map[chan *store.Call]struct{}, c *store.Call) {
	for ch := range set {
		select {
		case ch <- c:
		default:
			if c != nil {
				select { // the held wake-up, unless the waiter took it meanwhile
				case <-ch:
				default:
				}
				select {
				case ch <- c:
				default:
				}
			}
		}
	}
}

// Settled tells the calls waiting for these rows that they settled: the
// engine of this process calls it once their completion committed
// (drainer.Config.Settled), sooner than the notification arrives. A row
// whose news carries the state it settled in (a success with its tool
// result) is answered from it, without a read.
func (g *Gateway) Settled(rows []store.Settle) {
	for i := range rows {
		var c *store.Call
		if rows[i].Known {
			c = &rows[i].Call
		}
		g.watch.wake(rows[i].Key, c)
	}
}

// run listens until ctx ends, reconnecting with backoff (100 ms doubling to
// 5 s) when the connection fails.
func (w *settleWatch) run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := w.listen(ctx, func() { backoff = 100 * time.Millisecond })
		if ctx.Err() != nil {
			return
		}
		w.log.Warn("gateway: the settle listener lost its database connection; reconnecting (waiting calls read their rows meanwhile)",
			"err", err, "retry_in", backoff)
		w.wake("", nil)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// listen holds one connection: LISTEN, wake everyone (what was announced
// before is read now), then deliver announcements until it fails.
func (w *settleWatch) listen(ctx context.Context, connected func()) error {
	// Connecting and listening are bounded, as the engine's listener's
	// are: a server that accepts the connection and never answers (a
	// half-dead proxy, a partition) would otherwise hold the reconnect for
	// ever, and waiting calls would hear of their rows only by re-reading.
	setupCtx, cancelSetup := context.WithTimeout(ctx, listenSetupWait)
	defer cancelSetup()
	conn, err := w.connect(setupCtx)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(setupCtx, "LISTEN "+pgx.Identifier{w.channel}.Sanitize()); err != nil {
		return err
	}
	cancelSetup()
	connected()
	w.wake("", nil)
	w.mu.Lock()
	w.listens++
	if w.listens == 1 {
		close(w.listening)
	}
	w.mu.Unlock()
	for {
		n, err := store.NextNotification(ctx, conn, pingEvery, pingWait)
		if err != nil {
			return err
		}
		if w.heard != nil {
			w.heard()
		}
		w.wake(n.Payload, nil)
	}
}

// listenSetupWait bounds the listener's connect and LISTEN.
const listenSetupWait = 5 * time.Second

// pingEvery and pingWait: a listener quiet for pingEvery pings the server
// and gives the connection up when no answer comes within pingWait.
const (
	pingEvery = 10 * time.Second
	pingWait  = 5 * time.Second
)
