//go:build integration

package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/tooling/mockprovider"
	"github.com/jackc/pgx/v5/pgxpool"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"sigs.k8s.io/yaml"
)

// TestNewcomerPath walks the path of a new user from a fresh clone, running
// the repository's documents where they give commands: the root README's
// demo, an async Python agent installed per sdk/python's README, a
// TypeScript agent installed per sdk/typescript's README (both enqueueing
// on one database, with their own writes, drained by one `drainer run`),
// and the Helm chart rendered with its defaults, whose config the built
// binary accepts. Missing tools fail the test with the make target that
// installs them.
func TestNewcomerPath(t *testing.T) {
	t.Parallel()
	start := time.Now()
	pyRequireInterpreter(t)
	if _, err := exec.LookPath("npm"); err != nil {
		t.Fatalf("npm not found (%v): install Node 20 and run `make node-deps`", err)
	}
	t.Run("readme-demo", newcomerDemo)

	// One database for both agents, with a table of their own, and one
	// daemon draining it to a provider that records each request's key.
	dbURL, pool := newMigratedDB(t)
	if _, err := pool.Exec(context.Background(),
		`CREATE TABLE invoices (id text PRIMARY KEY, state text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	prov := newKeyRecorder(t)
	cfgPath := writeFile(t, t.TempDir(), "drainer.yaml", httpConfig(prov.url, "", "charge_card", "send_receipt"))
	d := startDaemon(t, "drainer-run", "--config", cfgPath, "--database-url", dbURL)
	d.waitReady(30 * time.Second)

	t.Run("python-async-agent", func(t *testing.T) { newcomerPython(t, dbURL, pool, prov) })
	t.Run("typescript-agent", func(t *testing.T) { newcomerTypeScript(t, dbURL, pool, prov) })
	d.requireRunning()
	t.Run("helm-chart", newcomerHelm)
	t.Logf("the newcomer's path took %v", time.Since(start).Round(100*time.Millisecond))
}

// newcomerDemo: the root README gives `make demo` and `make test` first;
// `make demo` builds and runs `bin/drainer demo`, which the test runs with
// the binary it built and a small run count. The demo must settle its rows
// and print human text, naming its log file on the first line.
func newcomerDemo(t *testing.T) {
	var readme []string
	for _, l := range readmeBlock(t, "../README.md", "### Try it, test it") {
		readme = append(readme, strings.Join(strings.Fields(strings.SplitN(l, "#", 2)[0]), " "))
	}
	for _, want := range []string{"make demo", "make test"} {
		if !slices.Contains(readme, want) {
			t.Errorf("README.md's quick start has no `%s` (its commands: %q)", want, readme)
		}
	}
	out, err := exec.Command("make", "-n", "-C", "..", "--no-print-directory", "demo").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n demo (make runs the README's commands): %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	last := strings.Fields(lines[len(lines)-1])
	if len(last) != 2 || filepath.Base(last[0]) != "drainer" || last[1] != "demo" {
		t.Fatalf("make demo's last command is %q, want ./bin/drainer demo", lines[len(lines)-1])
	}
	res := runCLIWithin(t, 4*time.Minute, nil, "demo", "--runs", "3", "--workers", "4")
	first, _, _ := strings.Cut(res.stdout, "\n")
	logFile, named := strings.CutPrefix(first, "logs: ")
	if named && strings.HasPrefix(filepath.Base(filepath.Dir(logFile)), "drainer-demo-") {
		t.Cleanup(func() { _ = os.RemoveAll(filepath.Dir(logFile)) })
	}
	if res.code != 0 {
		t.Fatalf("drainer demo: %s", res)
	}
	if _, err := os.Stat(logFile); !named || err != nil {
		t.Errorf("the demo's first line %q does not name its log file (%v)", first, err)
	}
	settled := regexp.MustCompile(`(?m)^settled (\d+) rows in \S+$`).FindStringSubmatch(res.stdout)
	if settled == nil || !strings.Contains(res.stderr, "draining: all "+settled[1]+" rows settled") {
		t.Errorf("the demo's summary does not say its rows settled\n%s", res)
	} else {
		t.Logf("drainer demo --runs 3: %s", settled[0])
	}
	if !strings.Contains(res.stdout, "duplicate effects at the provider: 0;") {
		t.Errorf("the demo's summary reports duplicate effects\n%s", res)
	}
	for _, line := range strings.Split(res.stdout+"\n"+res.stderr, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "{") {
			t.Errorf("a JSON log line in the demo's output: %s", line)
		}
	}
}

// keyRecorder is the agents' provider: the mock provider (checking each
// request's key against its tuple header) behind a server that records
// the Idempotency-Key header of every request.
type keyRecorder struct {
	*mockprovider.Provider
	url  string
	mu   sync.Mutex
	seen map[string]int
}

func newKeyRecorder(t *testing.T) *keyRecorder {
	t.Helper()
	r := &keyRecorder{Provider: mockprovider.New(mockprovider.Config{VerifyTuple: true}), seen: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.seen[req.Header.Get("Idempotency-Key")]++
		r.mu.Unlock()
		r.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(r.Close)
	r.url = srv.URL
	return r
}

func (r *keyRecorder) requests(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[key]
}

// agentTuples are the intents an agent of run enqueues for invoice, with
// the agent's own row, in one transaction.
func agentTuples(run, invoice string) []idemkey.Tuple {
	tools := []string{"charge_card", "send_receipt", "charge_card"}
	tuples := make([]idemkey.Tuple, len(tools))
	for i, tool := range tools {
		tuples[i] = idemkey.Tuple{AgentRunID: run, StepID: fmt.Sprintf("step-%d", i), ToolName: tool, BusinessScope: "invoice:" + invoice}
	}
	return tuples
}

// agentLine is what the agents' scripts print for each intent once settled.
var agentLine = regexp.MustCompile(`(?m)^(idem_v1_[0-9a-f]{32}) (\w+)$`)

// checkAgent checks what an agent script printed and what followed: a
// settled status for each intent, under the Go key of its tuple; the
// agent's own row committed; and each key sent to the provider once, in
// the Idempotency-Key header, with one effect.
func checkAgent(t *testing.T, out string, pool *pgxpool.Pool, prov *keyRecorder, invoice string, tuples []idemkey.Tuple) {
	t.Helper()
	t.Logf("the agent printed:\n%s", strings.TrimSpace(out))
	got := agentLine.FindAllStringSubmatch(out, -1)
	if len(got) != len(tuples) {
		t.Fatalf("the agent printed %d settled intents, want %d:\n%s", len(got), len(tuples), out)
	}
	for i, m := range got {
		key, status := m[1], m[2]
		if want := tuples[i].Key(); key != want {
			t.Errorf("intent %d: the library returned key %s, want the Go key %s", i, key, want)
		}
		if status != "succeeded" {
			t.Errorf("intent %s settled as %s, want succeeded (%+v)", key, status, readRow(t, pool, key))
		}
		if n := prov.requests(key); n != 1 {
			t.Errorf("the provider saw Idempotency-Key %s %d times, want once", key, n)
		}
		if n := prov.Effects(key); n != 1 {
			t.Errorf("the provider applied %s %d times, want once", key, n)
		}
	}
	var state string
	if err := pool.QueryRow(context.Background(), `SELECT state FROM invoices WHERE id = $1`, invoice).Scan(&state); err != nil {
		t.Errorf("the agent's own row %s: %v", invoice, err)
	}
	if bad := prov.Snapshot().BadRequests; bad != 0 {
		t.Errorf("the provider answered %d bad requests (key and tuple headers disagree)", bad)
	}
}

// newcomerPyAgent is an asyncio agent on drainer_client.aio: its own row
// and three intents in one transaction, then a wait for each outcome.
const newcomerPyAgent = `import asyncio, os
import psycopg
import drainer_client.aio as dca

async def main():
    async with await psycopg.AsyncConnection.connect(os.environ["DATABASE_URL"]) as conn:
        keys = []
        async with conn.transaction():
            await conn.execute("INSERT INTO invoices (id, state) VALUES (%s, 'charging')", ["inv_py"])
            for i, tool in enumerate(["charge_card", "send_receipt", "charge_card"]):
                key, created = await dca.enqueue(conn, "newcomer-py", f"step-{i}", tool, "invoice:inv_py",
                                                 {"invoice_id": "inv_py", "line": i})
                assert created, key
                keys.append(key)
        for key in keys:
            status, response, last_error = await dca.wait(conn, key, timeout=60)
            print(key, status, flush=True)

asyncio.run(main())
`

// newcomerPython installs drainer_client per sdk/python's README into a
// venv (no package index) and runs the asyncio agent with it.
func newcomerPython(t *testing.T, dbURL string, pool *pgxpool.Pool, prov *keyRecorder) {
	clone, _ := pyInstallFromReadme(t)
	dir := t.TempDir() // outside the clone: the import is the installed package
	script := writeFile(t, dir, "agent.py", newcomerPyAgent)
	out := installRun(t, dir, append([]string{"DATABASE_URL=" + dbURL}, pyInstallEnv...),
		filepath.Join(clone, ".venv", "bin", "python"), script)
	checkAgent(t, out, pool, prov, "inv_py", agentTuples("newcomer-py", "inv_py"))
}

// newcomerTSAgent is the same agent on @drainer/client and pg.
const newcomerTSAgent = `const pg = require('pg');
const { enqueue, waitFor } = require('@drainer/client');

(async () => {
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
  const client = await pool.connect();
  const keys = [];
  try {
    await client.query('BEGIN');
    await client.query("INSERT INTO invoices (id, state) VALUES ($1, 'charging')", ['inv_ts']);
    for (const [i, toolName] of ['charge_card', 'send_receipt', 'charge_card'].entries()) {
      const r = await enqueue(client, { agentRunId: 'newcomer-ts', stepId: 'step-' + i, toolName, businessScope: 'invoice:inv_ts' },
        { invoice_id: 'inv_ts', line: i });
      if (!r.created) throw new Error('not created: ' + r.key);
      keys.push(r.key);
    }
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK');
    throw err;
  } finally {
    client.release();
  }
  for (const key of keys) {
    const outcome = await waitFor(pool, key, { timeoutMs: 60000 });
    console.log(key, outcome.status);
  }
  await pool.end();
})().catch((err) => { console.error(err); process.exit(1); });
`

// newcomerTypeScript installs @drainer/client per sdk/typescript's README
// into a new project and runs the agent there.
func newcomerTypeScript(t *testing.T, dbURL string, pool *pgxpool.Pool, prov *keyRecorder) {
	clone := cloneTracked(t, "sdk/typescript")
	project := t.TempDir()
	tsInstallFromReadme(t, clone, project, "## Install into your project", "npm install /path/to/drainer/sdk/typescript")
	writeFile(t, project, "agent.js", newcomerTSAgent)
	out := installRun(t, project, append([]string{"DATABASE_URL=" + dbURL}, tsInstallEnv...), "node", "agent.js")
	checkAgent(t, out, pool, prov, "inv_ts", agentTuples("newcomer-ts", "inv_ts"))
}

// k8sObject is the part of a rendered object the Helm step reads.
type k8sObject struct {
	Kind     string
	Metadata struct{ Name string }
	Data     map[string]string
	Spec     struct {
		Template struct {
			Spec struct {
				Containers []struct {
					Name         string
					Args         []string
					Env          []struct{ Name, Value string }
					VolumeMounts []struct{ Name, MountPath string }
				}
				Volumes []struct {
					Name      string
					ConfigMap *struct{ Name string }
				}
			}
		}
	}
}

// renderDefaultChart renders deploy/helm/drainer as `helm template drainer
// deploy/helm/drainer -n drainer` with its default values, and returns the
// objects by kind.
func renderDefaultChart(t *testing.T) map[string]k8sObject {
	t.Helper()
	ch, err := loader.Load("../deploy/helm/drainer")
	if err != nil {
		t.Fatalf("load the chart: %v", err)
	}
	top, err := chartutil.ToRenderValues(ch, nil, chartutil.ReleaseOptions{
		Name: "drainer", Namespace: "drainer", Revision: 1, IsInstall: true,
	}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Engine{Strict: true}.Render(ch, top)
	if err != nil {
		t.Fatalf("render the chart: %v", err)
	}
	objs := map[string]k8sObject{}
	for name, text := range files {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for _, doc := range strings.Split(text, "\n---") {
			var o k8sObject
			if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if o.Kind != "" {
				objs[o.Kind] = o
			}
		}
	}
	return objs
}

// newcomerHelm: the chart's Deployment runs `drainer run --config FILE`
// with FILE from the chart's ConfigMap, and that config passes `drainer
// check` with the built binary (the container's variables set, as the
// Secrets would).
func newcomerHelm(t *testing.T) {
	objs := renderDefaultChart(t)
	dep, cm := objs["Deployment"], objs["ConfigMap"]
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) == 0 || cm.Metadata.Name == "" {
		t.Fatalf("the chart renders no Deployment with a container, or no ConfigMap (%d objects)", len(objs))
	}
	c := pod.Containers[0]
	cfgPath := ""
	for i, a := range c.Args {
		if a == "--config" && i+1 < len(c.Args) {
			cfgPath = c.Args[i+1]
		}
	}
	if len(c.Args) == 0 || c.Args[0] != "run" || cfgPath == "" {
		t.Fatalf("container %s args %q, want run --config FILE", c.Name, c.Args)
	}
	var data string
	for _, vm := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == vm.Name && v.ConfigMap != nil && v.ConfigMap.Name == cm.Metadata.Name &&
				path.Clean(vm.MountPath) == path.Dir(cfgPath) {
				data = cm.Data[path.Base(cfgPath)]
			}
		}
	}
	if data == "" {
		t.Fatalf("--config %s is no key of ConfigMap %s mounted in the container", cfgPath, cm.Metadata.Name)
	}
	var env []string
	for _, e := range c.Env {
		v := e.Value // a literal (GOMEMLIMIT); a secret's reference gets a placeholder
		switch {
		case v == "" && strings.HasSuffix(e.Name, "DATABASE_URL"):
			v = "postgres://placeholder@db.invalid/drainer" // check reads a URL as run does
		case v == "":
			v = "placeholder-" + strings.ToLower(e.Name)
		}
		env = append(env, e.Name+"="+v)
	}
	file := writeFile(t, t.TempDir(), path.Base(cfgPath), data)
	res := runCLI(t, env, "check", "--config", file)
	if res.code != 0 {
		t.Fatalf("drainer check --config %s (the chart's config): %s", path.Base(cfgPath), res)
	}
	t.Logf("%s: drainer %s; drainer check: %s", dep.Metadata.Name, strings.Join(c.Args, " "), strings.TrimSpace(res.stdout+res.stderr))
}
