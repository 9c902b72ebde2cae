package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/drainer-io/drainer/outbox"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/drainer"
	"github.com/prometheus/client_golang/prometheus"
)

// EnvReplica carries a replica process's ReplicaSpec (JSON): the peak_rss_bytes
// phase starts Options.ReplicaCommand with it set.
const EnvReplica = "DRAINER_BENCH_REPLICA"

// ReplicaSpec is what one replica process runs: an engine configured as
// `drainer run` configures it from the shipped defaults, around a no-op
// adapter that holds every row Hold before answering success.
type ReplicaSpec struct {
	DatabaseURL string        `json:"database_url"`
	Schema      string        `json:"schema"`
	ID          string        `json:"id"`
	Workers     int           `json:"workers"`
	Hold        time.Duration `json:"hold"`
}

// ReplicaReport is what a replica process prints when it stops.
type ReplicaReport struct {
	Dispatched  int64 `json:"dispatched"`
	InFlightMax int64 `json:"in_flight_max"`
}

// replicaReady is the line a replica prints once its engine runs.
const replicaReady = "ready"

// RunReplicaFromEnv runs the replica EnvReplica describes until ctx is
// done (the parent sends SIGTERM), then stops its engine and writes a
// ReplicaReport as one JSON line to out.
func RunReplicaFromEnv(ctx context.Context, out io.Writer) error {
	var spec ReplicaSpec
	if err := json.Unmarshal([]byte(os.Getenv(EnvReplica)), &spec); err != nil {
		return fmt.Errorf("%s: %w", EnvReplica, err)
	}
	return RunReplica(ctx, spec, out)
}

// RunReplica runs one replica process's engine: see RunReplicaFromEnv.
func RunReplica(ctx context.Context, spec ReplicaSpec, out io.Writer) (err error) {
	pool, err := newReplicaPool(ctx, spec.DatabaseURL, int32(replicaPoolSize(spec.Workers)))
	if err != nil {
		return err
	}
	defer pool.Close()
	var inFlight, maxInFlight, dispatched atomic.Int64
	adapter := dispatch.AdapterFunc(func(ctx context.Context, _ *dispatch.Message) dispatch.Result {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := maxInFlight.Load()
			if n <= m || maxInFlight.CompareAndSwap(m, n) {
				break
			}
		}
		t := time.NewTimer(spec.Hold)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return dispatch.Result{Outcome: dispatch.Retry, Reason: "shutdown", Err: ctx.Err()}
		}
		dispatched.Add(1)
		return dispatch.Result{Outcome: dispatch.Success}
	})
	rt, cfg, err := routing(adapter)
	if err != nil {
		return err
	}
	e, err := drainer.New(pool, rt, drainer.Config{
		Schema:    spec.Schema,
		ReplicaID: spec.ID,
		Workers:   spec.Workers,
		Lease:     cfg.Lease,
		Metrics:   drainer.NewMetrics(prometheus.NewRegistry(), ""),
	})
	if err != nil {
		return err
	}
	if err := e.Start(ctx); err != nil {
		return fmt.Errorf("start engine: %w", err)
	}
	fmt.Fprintln(out, replicaReady)
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.Stop(stopCtx); err != nil {
		return fmt.Errorf("stop engine: %w", err)
	}
	return json.NewEncoder(out).Encode(ReplicaReport{Dispatched: dispatched.Load(), InFlightMax: maxInFlight.Load()})
}

// replicaProc is one running replica process.
type replicaProc struct {
	cmd    *exec.Cmd
	stdout *bytes.Buffer
	ready  chan struct{}
	wg     sync.WaitGroup
}

// rss measures peak_rss_bytes: Replicas replica processes, each with
// RSSWorkers workers and an adapter that holds each row RSSHold, drain
// 3 × RSSWorkers rows per replica; the figure is the largest VmHWM.
func (r *runner) rss(ctx context.Context, res *Result) error {
	res.RSSWorkers = r.sizes.RSSWorkers
	if len(r.opts.ReplicaCommand) == 0 {
		r.logf("peak RSS: no replica command; not measured")
		return nil
	}
	// The replica processes open pools of their own; the in-process
	// replicas' connections are not needed any more.
	if err := r.closePools(ctx); err != nil {
		return err
	}
	n := 3 * r.sizes.RSSWorkers * r.opts.Replicas
	r.logf("peak RSS: %d replica processes × %d workers, each row held %s, draining %d rows", r.opts.Replicas, r.sizes.RSSWorkers, r.sizes.RSSHold, n)
	if err := r.fill(ctx, n); err != nil {
		return err
	}
	g := &replicaGroup{}
	defer func() { _ = g.stop() }()
	if err := r.startReplicas(ctx, g); err != nil {
		return err
	}
	if err := g.awaitReady(ctx); err != nil {
		return err
	}
	if err := r.awaitAllSucceeded(ctx, n); err != nil {
		return fmt.Errorf("peak RSS: %w", err)
	}
	all := g.procs
	if err := recordPeakRSS(all, res); err != nil {
		return err
	}
	if err := g.stop(); err != nil {
		return err
	}
	if err := recordInFlightMax(all, res); err != nil {
		return err
	}
	r.logf("peak RSS: %.1f MiB (largest replica process; all: %v bytes), at most %d rows in flight per replica",
		float64(res.PeakRSSBytes)/(1<<20), res.RSSReplicaBytes, res.RSSInFlightMax)
	return r.openPools(ctx)
}

// replicaGroup is the running replica processes of the peak_rss_bytes phase.
type replicaGroup struct {
	procs []*replicaProc
}

// startReplicas starts Replicas replica processes into g, each with
// RSSWorkers workers holding each row RSSHold.
func (r *runner) startReplicas(ctx context.Context, g *replicaGroup) error {
	for i := range r.opts.Replicas {
		p, err := r.startReplica(ctx, ReplicaSpec{DatabaseURL: r.url, Schema: r.schema, ID: "bench-proc-" + strconv.Itoa(i+1),
			Workers: r.sizes.RSSWorkers, Hold: r.sizes.RSSHold})
		if err != nil {
			return err
		}
		g.procs = append(g.procs, p)
	}
	return nil
}

// awaitReady waits until every process printed its ready line, for at most
// a minute each.
func (g *replicaGroup) awaitReady(ctx context.Context) error {
	for _, p := range g.procs {
		select {
		case <-p.ready:
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Minute):
			return fmt.Errorf("replica process %d did not start within a minute", p.cmd.Process.Pid)
		}
	}
	return nil
}

// stop sends every process SIGTERM, then reads each one's output to the end
// and waits for it to exit. It empties g, so a second call does nothing.
func (g *replicaGroup) stop() error {
	var errs []error
	for _, p := range g.procs {
		if p.cmd.Process != nil {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, p := range g.procs {
		// Read its output to the end before Wait, which closes the pipe.
		p.wg.Wait()
		if err := p.cmd.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("replica process %d: %w", p.cmd.Process.Pid, err))
		}
	}
	g.procs = nil
	return errors.Join(errs...)
}

// awaitAllSucceeded waits, within the phase timeout for n rows, until no
// row of the outbox is left unsucceeded.
func (r *runner) awaitAllSucceeded(ctx context.Context, n int) error {
	tctx, cancel := context.WithTimeout(ctx, r.phaseTimeout(n))
	defer cancel()
	var left int
	unsettled := slices.DeleteFunc(slices.Clone(outbox.Statuses), func(s outbox.Status) bool { return s == outbox.StatusSucceeded })
	err := waitFor(tctx, 50*time.Millisecond, func() (bool, error) {
		var err error
		left, err = r.store().CountInStatus(tctx, r.admin, unsettled...)
		return left == 0, err
	})
	if err != nil {
		return fmt.Errorf("%d of %d rows not succeeded: %w", left, n, err)
	}
	return nil
}

// recordPeakRSS records each running process's VmHWM and the largest.
func recordPeakRSS(procs []*replicaProc, res *Result) error {
	for _, p := range procs {
		hwm, err := vmHWM(p.cmd.Process.Pid)
		if err != nil {
			return fmt.Errorf("peak RSS of replica process %d: %w", p.cmd.Process.Pid, err)
		}
		res.RSSReplicaBytes = append(res.RSSReplicaBytes, hwm)
		res.PeakRSSBytes = max(res.PeakRSSBytes, hwm)
	}
	return nil
}

// recordInFlightMax records the most rows in flight in any one process, from
// the ReplicaReport each stopped process printed.
func recordInFlightMax(procs []*replicaProc, res *Result) error {
	for _, p := range procs {
		var rep ReplicaReport
		sc := bufio.NewScanner(bytes.NewReader(p.stdout.Bytes()))
		for sc.Scan() {
			if line := sc.Bytes(); len(line) > 0 && line[0] == '{' {
				if err := json.Unmarshal(line, &rep); err != nil {
					return fmt.Errorf("replica process report %q: %w", line, err)
				}
			}
		}
		res.RSSInFlightMax = max(res.RSSInFlightMax, int(rep.InFlightMax))
	}
	return nil
}

// startReplica starts one replica process and watches its output for the
// ready line.
func (r *runner) startReplica(ctx context.Context, spec ReplicaSpec) (*replicaProc, error) {
	env, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	argv := r.opts.ReplicaCommand
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), EnvReplica+"="+string(env))
	cmd.Stderr = r.progress
	dieWithParent(cmd)
	cmd.WaitDelay = time.Minute
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start replica process: %w", err)
	}
	p := &replicaProc{cmd: cmd, stdout: &bytes.Buffer{}, ready: make(chan struct{})}
	p.wg.Go(func() {
		sc := bufio.NewScanner(out)
		once := sync.OnceFunc(func() { close(p.ready) })
		for sc.Scan() {
			if sc.Text() == replicaReady {
				once()
				continue
			}
			p.stdout.Write(sc.Bytes())
			p.stdout.WriteByte('\n')
		}
	})
	return p, nil
}
