package config

import (
	"errors"
	"io/fs"
	"testing"
)

func TestErrorRendering(t *testing.T) {
	for _, tt := range []struct {
		err  Error
		want string
	}{
		{Error{File: "d.yaml", Line: 3, Col: 7, Field: "workers", Msg: "bad"}, "d.yaml:3:7: workers: bad"},
		{Error{File: "d.yaml", Line: 3, Field: "workers", Msg: "bad"}, "d.yaml:3: workers: bad"},
		{Error{File: "d.yaml", Line: 3, Col: 1, Msg: "invalid YAML: x"}, "d.yaml:3:1: invalid YAML: x"},
		{Error{File: "d.yaml", Field: "routes", Msg: "none"}, "d.yaml: routes: none"},
	} {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
	}
}

func TestErrorsListAndUnwrap(t *testing.T) {
	_, err := parse(t, "workers: x\nlease: y\n", false)
	if got, want := err.Error(), "c.yaml:1:10: workers: must be an integer, got \"x\"\n"+
		"c.yaml:2:8: lease: invalid duration \"y\": write a duration like \"30s\", \"10m\", \"1h30m\" or \"7d\""; got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	e, ok := errors.AsType[*Error](err)
	if !ok || e.Field != "workers" || e.Line != 1 || e.Col != 10 {
		t.Errorf("errors.As *Error: %+v", e)
	}
}

func TestErrorsSortAndDedupe(t *testing.T) {
	a := &Error{File: "f", Line: 2, Col: 1, Field: "b", Msg: "m"}
	got := Errors{a, {File: "f", Line: 1, Col: 5, Msg: "z"}, {File: "f", Line: 2, Col: 1, Field: "b", Msg: "m"}, {File: "f", Msg: "first"}}.sort()
	if len(got) != 3 || got[0].Msg != "first" || got[1].Msg != "z" || got[2] != a {
		t.Errorf("sort = %v", got)
	}
}

func TestAdapterAndRouteErrorf(t *testing.T) {
	cfg := mustParse(t, "adapters:\n  p: {type: http, url: \"http://p/{tool_name}\"}\nroutes:\n  t: {adapter: p}\n", false)
	err := cfg.Adapters["p"].Errorf("build: %w", fs.ErrPermission)
	if got, want := err.Error(), "c.yaml:2: adapters.p: build: permission denied"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if !errors.Is(err, fs.ErrPermission) {
		t.Error("Errorf does not wrap %w")
	}
	if got, want := cfg.Routes["t"].Errorf("no %s", "way").Error(), "c.yaml:4: routes.t: no way"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
