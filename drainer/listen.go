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
// saga at once). The claimer's poll covers any gap while it reconnects.
func (e *Engine) listener() *maintenance.Loop {
	return &maintenance.Loop{Name: "listener", Run: e.listen}
}

func (e *Engine) listen(ctx context.Context) {
	channel, sagaChannel := e.st.OutboxChannel(), e.st.SagaChannel()
	delay := 100 * time.Millisecond
	for ctx.Err() == nil {
		conn, err := pgx.ConnectConfig(ctx, e.pool.Config().ConnConfig.Copy())
		if err == nil {
			_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()+"; LISTEN "+pgx.Identifier{sagaChannel}.Sanitize())
			if err == nil {
				delay = 100 * time.Millisecond
				e.signalFull() // anything enqueued while not listening
				for {
					n, werr := conn.WaitForNotification(ctx)
					if werr != nil {
						err = werr
						break
					}
					if n.Channel == sagaChannel {
						e.sagas.Notify(n.Payload)
						continue
					}
					if p, ok := store.WakePosition(n.Payload); ok {
						e.floor.lower(p)
						e.signal()
					} else {
						e.signalFull()
					}
				}
			}
			closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = conn.Close(closeCtx)
			cancel()
		}
		if isShutdown(ctx, err) {
			return
		}
		e.log.Warn("listen connection lost; polling until it is back", "err", err, "retry_in", delay)
		if !sleep(ctx, delay) {
			return
		}
		delay = min(delay*2, 10*time.Second)
	}
}
