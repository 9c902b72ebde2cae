//go:build integration

package integration

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	clone, out := pyInstallFromReadme(t)
	if !strings.Contains(out, installTuple.Key()) {
		t.Fatalf("the README's last step printed %q, want the key %s", out, installTuple.Key())
	}
	// From another directory, so the import is the installed package.
	out = installRun(t, t.TempDir(), pyInstallEnv, filepath.Join(clone, ".venv", "bin", "python"), "-c",
		`import drainer_client; print(drainer_client.idempotency_key("run-1", "step-1", "charge_card", "")); print(drainer_client.__file__)`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 || lines[len(lines)-2] != installTuple.Key() || !strings.Contains(lines[len(lines)-1], "site-packages") {
		t.Fatalf("installed drainer_client printed %q; want the key %s and a module under site-packages", out, installTuple.Key())
	}
	// The receiver module ships in the package too.
	out = installRun(t, t.TempDir(), pyInstallEnv, filepath.Join(clone, ".venv", "bin", "python"), "-c",
		`from drainer_client.receiver import Receiver; print(callable(Receiver.wrap))`)
	if strings.TrimSpace(out) != "True" {
		t.Fatalf("installed drainer_client.receiver printed %q, want True", out)
	}
}

// pyInstallEnv is the environment of the Python install steps: pip kept
// away from any package index.
var pyInstallEnv = []string{"PIP_NO_INDEX=1", "PIP_DISABLE_PIP_VERSION_CHECK=1", "PYTHONDONTWRITEBYTECODE=1"}

// pyInstallFromReadme runs the block under "## Install" of sdk/python's
// README, line by line, at the root of a copy of the committed files; the
// apt-get line is what pyRequireInterpreter checks. It returns the copy's
// root (the venv is its .venv) and the last step's output.
func pyInstallFromReadme(t *testing.T) (clone, out string) {
	t.Helper()
	steps := readmeBlock(t, "../sdk/python/README.md", "## Install")
	clone = cloneTracked(t, "sdk/python")
	for _, step := range steps {
		if strings.HasPrefix(step, "sudo apt-get install") {
			continue
		}
		out = installRun(t, clone, pyInstallEnv, "sh", "-c", step)
	}
	return clone, out
}

// TestTypeScriptInstallFromClone installs @drainer/client into fresh
// projects the two ways sdk/typescript's README gives, following its blocks
// literally, from a copy of the library's committed files (what a clone
// holds): linked from the folder ("Install into your project") and from
// `npm pack`'s tarball ("From a tarball"). Each install must run no install
// script (npm warns about none), write nothing into the copy, bring pg, and
// give a package that both require and import load (one implementation,
// the receiver too) and that derives the Go key.
func TestTypeScriptInstallFromClone(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("npm"); err != nil {
		t.Fatalf("npm not found (%v): install Node 20", err)
	}
	clone := cloneTracked(t, "sdk/typescript")
	lib := filepath.Join(clone, "sdk", "typescript")
	for _, f := range []string{"dist/index.js", "dist/cjs/index.js", "dist/receiver.js", "dist/cjs/receiver.js"} {
		if _, err := os.Stat(filepath.Join(lib, f)); err != nil {
			t.Fatalf("the copy of the committed files has no %s: the package must run from committed files, with no build at install", f)
		}
	}
	before := tsTreeSnapshot(t, lib)
	for _, c := range []struct {
		name, heading, install string
		linked                 bool
	}{
		{"clone", "## Install into your project", "npm install /path/to/drainer/sdk/typescript", true},
		{"tarball", "### From a tarball", "npm install ./drainer-client-", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			project := t.TempDir()
			all := tsInstallFromReadme(t, clone, project, c.heading, c.install)
			if w := tsScriptWarnings(all); len(w) > 0 {
				t.Errorf("npm warned about scripts or peers while installing:\n%s", strings.Join(w, "\n"))
			}
			fi, err := os.Lstat(filepath.Join(project, "node_modules", "@drainer", "client"))
			if err != nil {
				t.Fatalf("@drainer/client is not installed: %v", err)
			}
			if linked := fi.Mode()&os.ModeSymlink != 0; linked != c.linked {
				t.Errorf("node_modules/@drainer/client is a link: %v, want %v", linked, c.linked)
			}
			// pg came with the install: the project's own code can use it.
			out := installRun(t, project, tsInstallEnv, "node", "-e",
				`console.log(require('pg/package.json').version, typeof require('pg').Pool)`)
			if !regexp.MustCompile(`(?m)^8\.\d+\.\d+ function$`).MatchString(out) {
				t.Errorf("pg in the project: %q, want version 8 and its Pool", out)
			}
			tsRequireAndImport(t, project)
			if diff := tsTreeDiff(before, tsTreeSnapshot(t, lib)); len(diff) > 0 {
				t.Fatalf("installing wrote into the clone's sdk/typescript:\n%s", strings.Join(diff, "\n"))
			}
		})
	}
}

// tsInstallFromReadme follows the block under heading of sdk/typescript's
// README in project, a new package (the `cd` steps name it), with
// /path/to/drainer the clone: the block must hold a step beginning with
// install, and each node step must print the key of installTuple. It
// returns the steps' combined output.
func tsInstallFromReadme(t *testing.T, clone, project, heading, install string) string {
	t.Helper()
	steps := readmeBlock(t, "../sdk/typescript/README.md", heading)
	if err := os.WriteFile(filepath.Join(project, "package.json"), []byte(`{"name": "consumer", "private": true}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	installed, printed := false, 0
	for _, step := range steps {
		if strings.HasPrefix(step, "cd ") {
			continue // the project is the temporary directory
		}
		installed = installed || strings.HasPrefix(step, install)
		out := installRun(t, project, tsInstallEnv, "sh", "-c", strings.ReplaceAll(step, "/path/to/drainer", clone))
		all.WriteString(out)
		if strings.HasPrefix(step, "node ") {
			if got := strings.TrimSpace(out); !strings.HasSuffix(got, installTuple.Key()) {
				t.Fatalf("the README's step %q printed %q, want the key %s", step, got, installTuple.Key())
			}
			printed++
		}
	}
	if !installed || printed == 0 {
		t.Fatalf("the README's block under %q (%q) has no `%s…` or no node step printing the key", heading, steps, install)
	}
	return all.String()
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
