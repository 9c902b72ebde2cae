package drainer

import (
	"context"
	"time"

	"github.com/drainer-io/drainer/internal/maintenance"
	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5"
)

// listener holds a dedicated connection LISTENing on the outbox channel
// (wakes the claimer) and the saga channel (an abort: advances that run's
// saga at once). A connection that dies is replaced at once (then with
// back-off), one that stays quiet is pinged every wakeCheckEvery, and
// every new LISTEN is followed by a claim from the first due row: the
// notifications sent meanwhile were lost. The claimer's poll covers any
// gap while it reconnects.
func (e *Engine) listener() *maintenance.Loop {
	return &maintenance.Loop{Name: "listener", Run: e.listen}
}

func (e *Engine) listen(ctx context.Context) {
	delay := time.Duration(0)
	for ctx.Err() == nil {
		heard := time.Now()
		began := heard
		listened, err := e.listenOnce(ctx, &heard)
		if ctx.Err() != nil {
			return
		}
		if listened && time.Since(began) >= wakeHealthy {
			delay = 0 // it had been listening a while: try again at once
		}
		if e.db.failed("listener", heard, err) {
			e.log.Warn("listen connection lost; polling until it is back", "err", err, "retry_in", delay)
		}
		if !sleep(ctx, delay) {
			return
		}
		delay = min(max(2*delay, 100*time.Millisecond), 10*time.Second)
	}
}

// listenSetupWait bounds the listener's connect and LISTEN.
const listenSetupWait = 5 * time.Second

// listenOnce connects, LISTENs and hands notifications to the claim loop
// and the saga runner until the connection fails; listened says it got as
// far as listening. It moves heard to the connection's last sign of life
// it saw (listening, a notification): its failure is not older than that.
func (e *Engine) listenOnce(ctx context.Context, heard *time.Time) (listened bool, err error) {
	channel, sagaChannel := e.st.OutboxChannel(), e.st.SagaChannel()
	// Connecting and listening are bounded, as the wake gate's are: a
	// server that accepts the connection and never answers would otherwise
	// leave the replica deaf, waiting for polls, until TCP gave up.
	setupCtx, cancelSetup := context.WithTimeout(ctx, listenSetupWait)
	defer cancelSetup()
	conn, err := store.ConnectBeside(setupCtx, e.pool, "listen")
	if err != nil {
		return false, err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = conn.Close(closeCtx)
		cancel()
	}()
	if _, err := conn.Exec(setupCtx, "LISTEN "+pgx.Identifier{channel}.Sanitize()+"; LISTEN "+pgx.Identifier{sagaChannel}.Sanitize()); err != nil {
		return false, err
	}
	cancelSetup()
	*heard = time.Now()
	e.listenedOnce.Do(func() { close(e.listening) })
	e.floor.wantFull() // anything enqueued while not listening
	e.wakeFor(causeRearm)
	for {
		n, err := store.NextNotification(ctx, conn, wakeCheckEvery, wakePingWait)
		if err != nil {
			return true, err
		}
		*heard = time.Now()
		if n.Channel == sagaChannel {
			e.sagas.Notify(n.Payload)
			continue
		}
		p, ok := store.WakePosition(n.Payload)
		if ok {
			e.floor.lower(p)
		} else {
			e.floor.wantFull()
		}
		e.witness.heardOf(p, ok, time.Now(), &e.claims)
		e.wakeFor(causeNotify)
	}
}
