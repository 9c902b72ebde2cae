package maintenance

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestPeriodicTicksAtStartOnWakeAndStops(t *testing.T) {
	var ticks atomic.Int64
	got := make(chan struct{}, 10)
	wake := make(chan struct{})
	l := Periodic("test", Every(time.Hour), wake, func(context.Context) {
		ticks.Add(1)
		got <- struct{}{}
	})
	if err := l.Stop(t.Context()); err != nil {
		t.Fatalf("stop before start: %v", err)
	}
	if err := l.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	<-got // the tick at start
	wake <- struct{}{}
	<-got // the tick on wake
	if err := l.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := l.Stop(t.Context()); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	if n := ticks.Load(); n != 2 {
		t.Fatalf("%d ticks; want 2 (start and wake; the hour never passed)", n)
	}
	if err := l.Start(t.Context()); err == nil {
		t.Fatal("a loop started twice")
	}
}

type recorder struct {
	name    string
	log     *[]string
	failing bool
}

func (r recorder) Start(context.Context) error {
	if r.failing {
		return errors.New(r.name + " failed")
	}
	*r.log = append(*r.log, "start "+r.name)
	return nil
}

func (r recorder) Stop(context.Context) error {
	*r.log = append(*r.log, "stop "+r.name)
	return nil
}

func TestGroupStopsInReverseAndUnwindsAFailedStart(t *testing.T) {
	var log []string
	var g Group
	err := g.Start(t.Context(), recorder{"a", &log, false}, recorder{"b", &log, false}, recorder{"c", &log, true})
	if err == nil {
		t.Fatal("a failing service did not fail the group")
	}
	want := "[start a start b stop b stop a]"
	if got := fmtList(log); got != want {
		t.Fatalf("log %s; want %s", got, want)
	}
}

func fmtList(s []string) string {
	out := "["
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out + "]"
}
