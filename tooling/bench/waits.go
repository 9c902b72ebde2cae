package bench

import (
	"context"
	"sync"
	"time"
)

// waitSampleInterval is how often sampleWaits looks at pg_stat_activity.
const waitSampleInterval = 10 * time.Millisecond

// waitSampleSQL names what each replica connection is doing: for an active
// one its wait event ("CPU" without one), for the others their state
// ("idle": the server waits for the client).
const waitSampleSQL = `
SELECT CASE WHEN state = 'active' THEN coalesce(wait_event_type || ':' || wait_event, 'CPU')
            ELSE 'Client:' || coalesce(state, 'unknown') END, count(*)
  FROM pg_stat_activity
 WHERE application_name = $1 AND datname = current_database()
 GROUP BY 1`

// sampleWaits samples the replica connections until the returned function
// is called, which returns how often each state was seen.
func (r *runner) sampleWaits(ctx context.Context) func() map[string]int {
	ctx, cancel := context.WithCancel(ctx)
	counts := map[string]int{}
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(waitSampleInterval)
		defer t.Stop()
		for {
			rows, err := r.admin.Query(ctx, waitSampleSQL, replicaApplicationName)
			if err == nil {
				var k string
				var n int
				for rows.Next() {
					if rows.Scan(&k, &n) == nil {
						counts[k] += n
					}
				}
				rows.Close()
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	return func() map[string]int {
		cancel()
		wg.Wait()
		return counts
	}
}
