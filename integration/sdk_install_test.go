//go:build integration

package integration

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/idemkey"
)

// installTuple is the tuple the install tests derive a key for, through the
// installed library, to compare with the Go function.
var installTuple = idemkey.Tuple{AgentRunID: "run-1", StepID: "step-1", ToolName: "charge_card"}

// TestPythonInstallFromClone follows the install steps of sdk/python's README
// literally, in a copy of the library's committed files (what a clone holds),
// with pip kept away from any package index: a venv of Debian's python3 that
// sees Debian's psycopg, and pip install --no-build-isolation. The installed
// package must import from outside the clone and derive the Go key.
func TestPythonInstallFromClone(t *testing.T) {
	t.Parallel()
	pyRequireInterpreter(t)
	// The README's block, line by line, at the clone's root; the apt-get
	// line is what pyRequireInterpreter checked.
	steps := readmeBlock(t, "../sdk/python/README.md", "## Install")
	clone := cloneTracked(t, "sdk/python")
	env := []string{"PIP_NO_INDEX=1", "PIP_DISABLE_PIP_VERSION_CHECK=1", "PYTHONDONTWRITEBYTECODE=1"}
	var out string
	for _, step := range steps {
		if strings.HasPrefix(step, "sudo apt-get install") {
			continue
		}
		out = installRun(t, clone, env, "sh", "-c", step)
	}
	if !strings.Contains(out, installTuple.Key()) {
		t.Fatalf("the README's last step printed %q, want the key %s", out, installTuple.Key())
	}
	// From another directory, so the import is the installed package.
	out = installRun(t, t.TempDir(), env, filepath.Join(clone, ".venv", "bin", "python"), "-c",
		`import drainer_client; print(drainer_client.idempotency_key("run-1", "step-1", "charge_card", "")); print(drainer_client.__file__)`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 || lines[len(lines)-2] != installTuple.Key() || !strings.Contains(lines[len(lines)-1], "site-packages") {
		t.Fatalf("installed drainer_client printed %q; want the key %s and a module under site-packages", out, installTuple.Key())
	}
	// The receiver module ships in the package too.
	out = installRun(t, t.TempDir(), env, filepath.Join(clone, ".venv", "bin", "python"), "-c",
		`from drainer_client.receiver import Receiver; print(callable(Receiver.wrap))`)
	if strings.TrimSpace(out) != "True" {
		t.Fatalf("installed drainer_client.receiver printed %q, want True", out)
	}
}

// TestTypeScriptInstallFromClone installs @drainer/client into a new project
// with `npm install /path/to/sdk/typescript` from a copy of the library's
// committed files (no node_modules, no dist: what a clone holds), as the
// README says; the package must build on install, import, and derive the
// Go key.
func TestTypeScriptInstallFromClone(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("npm"); err != nil {
		t.Fatalf("npm not found (%v): install Node 20", err)
	}
	steps := readmeBlock(t, "../sdk/typescript/README.md", "## Install into your project")
	clone := cloneTracked(t, "sdk/typescript")
	if _, err := os.Stat(filepath.Join(clone, "sdk", "typescript", "dist")); err == nil {
		t.Fatal("the copy holds dist/: it must come from the install")
	}
	project := t.TempDir()
	if err := os.WriteFile(filepath.Join(project, "package.json"), []byte(`{"name": "consumer", "private": true}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"NO_COLOR=1", "npm_config_update_notifier=false", "npm_config_audit=false", "npm_config_fund=false"}
	var out string
	installed := false
	for _, step := range steps {
		if strings.HasPrefix(step, "cd ") {
			continue // the project is the temporary directory
		}
		installed = installed || strings.HasPrefix(step, "npm install /path/to/drainer/sdk/typescript")
		step = strings.ReplaceAll(step, "/path/to/drainer", clone)
		out = installRun(t, project, env, "sh", "-c", step)
	}
	if !installed {
		t.Fatalf("the README's install block %q has no `npm install /path/to/drainer/sdk/typescript`", steps)
	}
	if got := strings.TrimSpace(out); !strings.HasSuffix(got, installTuple.Key()) {
		t.Fatalf("the README's last step printed %q, want the key %s", got, installTuple.Key())
	}
	// The subpath export of the receiver resolves in the installed package.
	out = installRun(t, project, env, "node", "--input-type=module", "-e",
		`const m = await import('@drainer/client/receiver'); console.log(typeof m.createReceiver)`)
	if got := strings.TrimSpace(out); !strings.HasSuffix(got, "function") {
		t.Fatalf("import('@drainer/client/receiver') printed %q, want function", got)
	}
}

// readmeBlock returns the command lines (not comments, not blank) of the
// first fenced code block after the heading line of readme: the steps the
// test runs are the steps users read.
func readmeBlock(t *testing.T, readme, heading string) []string {
	t.Helper()
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no heading %q", readme, heading)
	}
	_, after, ok = strings.Cut(after, "```")
	if ok {
		_, after, ok = strings.Cut(after, "\n") // the fence's language
	}
	block := ""
	if ok {
		block, _, ok = strings.Cut(after, "```")
	}
	if !ok {
		t.Fatalf("%s: no code block under %q", readme, heading)
	}
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		t.Fatalf("%s: the block under %q is empty", readme, heading)
	}
	return lines
}

// cloneTracked copies the files git tracks under dir (relative to the
// repository root) into a fresh directory at the same relative path and
// returns that directory's root.
func cloneTracked(t *testing.T, dir string) string {
	t.Helper()
	out, err := exec.Command("git", "-C", "..", "ls-files", "-z", "--", dir).Output()
	if err != nil {
		t.Fatalf("git ls-files %s: %v", dir, err)
	}
	root := t.TempDir()
	n := 0
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if f == "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n == 0 {
		t.Fatalf("git tracks no file under %s", dir)
	}
	return root
}

// installRun runs name with args in dir (environment without DRAINER_* and
// PYTHON* variables, plus env) and returns its combined output; a failure
// or a run over 5 minutes fails the test.
func installRun(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var base []string
	for _, kv := range childEnv() {
		if !strings.HasPrefix(kv, "PYTHON") {
			base = append(base, kv)
		}
	}
	cmd.Env = append(base, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String()
	case ctx.Err() != nil:
		t.Fatalf("%s %s in %s did not finish within 5 minutes\n%s", name, strings.Join(args, " "), dir, tail(out.String(), 6000))
	case errors.As(err, &ee):
		t.Fatalf("%s %s in %s exited %d\n%s", name, strings.Join(args, " "), dir, ee.ExitCode(), tail(out.String(), 6000))
	default:
		t.Fatalf("%s %s in %s: %v", name, strings.Join(args, " "), dir, err)
	}
	return ""
}
