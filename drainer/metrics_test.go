package drainer

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/prometheus/client_golang/prometheus"
)

// series returns the series of the family name in reg, by their labels'
// values joined with "/", with their values.
func series(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var lv []string
			for _, l := range m.GetLabel() {
				lv = append(lv, l.GetValue())
			}
			out[strings.Join(lv, "/")] = m.GetGauge().GetValue()
		}
	}
	return out
}

// TestHoldSecondsZeroWhenNotHeld: drainer_hold_seconds has a series for
// every route of an adapter and for the whole adapter, 0 while not held
// (a dashboard shows 0, not "no data"), the hold's age once held, and never
// two series for one route.
func TestHoldSecondsZeroWhenNotHeld(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, "test")
	g := newGate("pay", GatePolicy{}, m, slog.New(slog.DiscardHandler))
	g.setRoutes(map[string]bool{"charge": true, "refund": true})
	states := func() []AdapterState { return []AdapterState{g.status(time.Now())} }
	m.adapterStates.Store(&states)

	got := series(t, reg, "drainer_hold_seconds")
	want := map[string]float64{"pay/*": 0, "pay/charge": 0, "pay/refund": 0}
	if len(got) != len(want) || got["pay/*"] != 0 || got["pay/charge"] != 0 || got["pay/refund"] != 0 {
		t.Fatalf("drainer_hold_seconds before any hold: %v; want %v", got, want)
	}
	g.noteAuth("charge", dispatch.Result{Outcome: dispatch.Auth, Status: 401})
	got = series(t, reg, "drainer_hold_seconds")
	if len(got) != 3 || got["pay/charge"] <= 0 || got["pay/refund"] != 0 || got["pay/*"] != 0 {
		t.Fatalf("drainer_hold_seconds with route charge held: %v; want charge's age, 0 for the others", got)
	}
}

// TestInitConfiguredBeforeTheEngine: the series of the configured adapters
// and routes exist before an engine runs: not ready, not held, breaker
// closed, no unrouted rows for a routed tool; an engine's own states then
// replace them.
func TestInitConfiguredBeforeTheEngine(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, "test")
	m.InitConfigured(map[string][]string{"pay": {"refund", "charge"}, "spare": nil})
	if got := series(t, reg, "drainer_adapter_ready"); len(got) != 2 || got["pay"] != 0 || got["spare"] != 0 {
		t.Fatalf("drainer_adapter_ready before the engine runs: %v; want pay and spare at 0", got)
	}
	if got := series(t, reg, "drainer_hold_seconds"); len(got) != 4 || got["pay/*"] != 0 || got["pay/charge"] != 0 || got["pay/refund"] != 0 || got["spare/*"] != 0 {
		t.Fatalf("drainer_hold_seconds before the engine runs: %v; want pay/*, pay/charge, pay/refund, spare/* at 0", got)
	}
	if got := series(t, reg, "drainer_unrouted_rows"); len(got) != 2 || got["charge"] != 0 || got["refund"] != 0 {
		t.Fatalf("drainer_unrouted_rows before the engine runs: %v; want charge and refund at 0", got)
	}
	if got := series(t, reg, "drainer_circuit_breaker_state"); len(got) != 2 {
		t.Fatalf("drainer_circuit_breaker_state before the engine runs: %v; want pay and spare", got)
	}
	dispatched := series(t, reg, "drainer_dispatch_total")
	for _, a := range []string{"pay", "spare"} {
		for _, o := range outbox.DispatchOutcomes {
			if _, ok := dispatched[a+"/"+string(o)]; !ok && o != outbox.OutcomeUnrouted {
				t.Errorf("drainer_dispatch_total has no series for %s, %s", a, o)
			}
		}
	}

	states := func() []AdapterState {
		return []AdapterState{{Adapter: "pay", Ready: true, Routes: []string{"charge"}}}
	}
	m.adapterStates.Store(&states)
	if got := series(t, reg, "drainer_adapter_ready"); len(got) != 1 || got["pay"] != 1 {
		t.Fatalf("drainer_adapter_ready once the engine runs: %v; want the engine's pay at 1", got)
	}
}

// TestUnroutedSeriesKeepRoutedTools: each snapshot replaces the unrouted
// tools it exports, and the routed tools stay at 0 (the unrouted panels
// and alerts read 0, not "no data", while every tool is routed).
func TestUnroutedSeriesKeepRoutedTools(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, "test")
	var s store.Snapshot
	s.Stats.Unrouted = []store.UnroutedTool{{Tool: "mystery", Rows: 3, OldestAge: 60}, {Tool: "refund", Rows: 1, OldestAge: 5}}
	m.apply(s, []string{"charge", "refund"}) // refund: routed here, unrouted where the snapshot was computed
	rows, age := series(t, reg, "drainer_unrouted_rows"), series(t, reg, "drainer_unrouted_oldest_age_seconds")
	if len(rows) != 3 || rows["charge"] != 0 || rows["refund"] != 1 || rows["mystery"] != 3 {
		t.Fatalf("drainer_unrouted_rows: %v; want charge 0, refund 1, mystery 3", rows)
	}
	if len(age) != 3 || age["charge"] != 0 || age["refund"] != 5 || age["mystery"] != 60 {
		t.Fatalf("drainer_unrouted_oldest_age_seconds: %v; want charge 0, refund 5, mystery 60", age)
	}
	m.apply(store.Snapshot{}, []string{"charge", "refund"})
	if rows := series(t, reg, "drainer_unrouted_rows"); len(rows) != 2 || rows["charge"] != 0 || rows["refund"] != 0 {
		t.Fatalf("drainer_unrouted_rows once every row is routed: %v; want charge and refund at 0", rows)
	}
}

// TestSnapshotAgeGrowsWhileNoSnapshotIsRead: the snapshot's age is
// computed at each scrape, so it grows while no new snapshot is read (the
// database slow or gone), and DrainerSnapshotStale can fire; it was set
// once per read, from the snapshot's age when read, and stayed at a few
// milliseconds for as long as reads failed. Before the first snapshot it
// counts from the start.
func TestSnapshotAgeGrowsWhileNoSnapshotIsRead(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, "test")
	m.born = time.Now().Add(-time.Hour)
	if age := series(t, reg, "drainer_outbox_snapshot_age_seconds")[""]; age < 3600 {
		t.Errorf("before any snapshot, an hour after the start: age %v s, want at least 3600", age)
	}
	m.apply(store.Snapshot{Age: 2 * time.Second}, nil)
	if age := series(t, reg, "drainer_outbox_snapshot_age_seconds")[""]; age < 2 || age > 60 {
		t.Errorf("just after a snapshot 2 s old was read: age %v s", age)
	}
	// Ten minutes without a new read.
	m.snapshotRead.Store(&snapshotMark{age: 2 * time.Second, readAt: time.Now().Add(-10 * time.Minute)})
	if age := series(t, reg, "drainer_outbox_snapshot_age_seconds")[""]; age < 602 {
		t.Errorf("ten minutes after the last read: age %v s, want at least 602", age)
	}
}

// TestAuthHoldLapsesWithoutRows: a hold whose time is over and that no row
// came to recheck (this replica has no more rows of the route; another
// replica's accepted request ended its own hold) lapses: the gauge and
// readiness stop reporting it. Before, the hold's age grew for ever on
// such a replica and a page on a long hold never cleared after the fix.
func TestAuthHoldLapsesWithoutRows(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, "test")
	g := newGate("pay", GatePolicy{}, m, slog.New(slog.DiscardHandler))
	g.lapse = 50 * time.Millisecond
	g.setRoutes(map[string]bool{"charge": true})
	states := func() []AdapterState { return []AdapterState{g.status(time.Now())} }
	m.adapterStates.Store(&states)
	g.noteAuth("charge", dispatch.Result{Outcome: dispatch.Auth, Status: 401})
	if got := series(t, reg, "drainer_hold_seconds"); got["pay/charge"] <= 0 || got["pay/*"] <= 0 {
		t.Fatalf("drainer_hold_seconds once held: %v; want the route and the whole adapter held", got)
	}
	if st := g.status(time.Now()); st.Ready {
		t.Fatal("ready while the whole adapter is held")
	}
	// Still held while its time runs: a second and the lapse after it.
	if got := series(t, reg, "drainer_hold_seconds"); got["pay/charge"] <= 0 {
		t.Fatalf("the hold lapsed before its end: %v", got)
	}
	time.Sleep(holdFor(0) + 2*g.lapse)
	got := series(t, reg, "drainer_hold_seconds")
	if got["pay/charge"] != 0 || got["pay/*"] != 0 {
		t.Fatalf("drainer_hold_seconds a lapse after the hold ended with no recheck: %v; want 0", got)
	}
	if st := g.status(time.Now()); !st.Ready || len(st.Holds) != 0 {
		t.Fatalf("status after the lapse: %+v; want ready, no hold", st)
	}
	if _, left := g.holdAdmit("charge"); left != 0 {
		t.Fatalf("a row after the lapse waits %v", left)
	}
}
