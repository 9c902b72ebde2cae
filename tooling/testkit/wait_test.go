package testkit

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeTB records a failure (the string arguments of Fatalf, each followed
// by "|") instead of failing the test; Fatalf then unwinds the wait, as
// the testing package's does.
type fakeTB struct {
	testing.TB
	failed atomic.Bool
	msg    atomic.Value
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed.Store(true)
	var b strings.Builder
	for _, a := range args {
		if s, ok := a.(string); ok {
			b.WriteString(s + "|")
		}
	}
	f.msg.Store(b.String())
	panic(fatal{})
}

type fatal struct{}

// wait runs WaitFor on f and reports whether it returned normally.
func wait(f *fakeTB, within time.Duration, what string, cond func() (bool, string)) (returned bool) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(fatal); !ok {
				panic(r)
			}
		}
	}()
	WaitFor(f, within, what, cond)
	return true
}

func TestWaitForReturnsOnceTheConditionHolds(t *testing.T) {
	var looks int
	f := &fakeTB{}
	// The bound is an hour: the wait ends because the condition holds.
	if !wait(f, time.Hour, "the fifth look", func() (bool, string) { looks++; return looks == 5, "" }) || f.failed.Load() {
		t.Fatalf("WaitFor failed on a condition that held at the fifth look")
	}
	if looks != 5 {
		t.Fatalf("cond looked at %d times, want 5 (it returns as soon as the condition holds)", looks)
	}
}

func TestWaitForFailsNamingWhatAndTheLastState(t *testing.T) {
	var looks int
	f := &fakeTB{}
	returned := wait(f, 0, "the impossible", func() (bool, string) { looks++; return false, "state " + string(rune('0'+looks)) })
	if returned || !f.failed.Load() {
		t.Fatal("WaitFor did not fail on a condition that never holds")
	}
	msg, _ := f.msg.Load().(string)
	if !strings.Contains(msg, "the impossible|") || !strings.Contains(msg, "state "+string(rune('0'+looks))+"|") {
		t.Fatalf("failure names %q, want what was awaited and the last state (look %d)", msg, looks)
	}
}

func TestWaitForWithNoTimeLooksOnce(t *testing.T) {
	var looks int
	f := &fakeTB{}
	// With no time at all, the first look still decides.
	if !wait(f, 0, "a condition that holds at once", func() (bool, string) { looks++; return true, "" }) || f.failed.Load() {
		t.Fatal("WaitFor failed a condition that held at its first look")
	}
	if looks != 1 {
		t.Fatalf("cond looked at %d times, want 1", looks)
	}
}
