package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/config"
)

const specDir = "../../internal/openapiroutes/testdata/"

// TestRoutesImport runs the command as a user would: the printed routes,
// spliced into a config with the named http adapter, pass `drainer check`.
func TestRoutesImport(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := execute([]string{"routes", "import", "--openapi", specDir + "payments-3.0.yaml", "--adapter", "payments"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	cfgFile := filepath.Join(t.TempDir(), "drainer.yaml")
	cfgText := "adapters:\n  payments: {type: http, url: \"https://payments.example.com/v1/{tool_name}\"}\n" + out.String()
	if err := os.WriteFile(cfgFile, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	var checkOut, checkErr bytes.Buffer
	if code := execute([]string{"check", "--config", cfgFile}, &checkOut, &checkErr); code != 0 {
		t.Fatalf("check exit %d: %s\n%s", code, checkErr.String(), cfgText)
	}
	cfg, err := config.Load(cfgFile, config.LoadOptions{Check: true})
	if err != nil || len(cfg.Routes) != 5 {
		t.Fatalf("routes %v, err %v", cfg, err)
	}
}

func TestRoutesImportEnvAndErrors(t *testing.T) {
	t.Setenv("DRAINER_OPENAPI", specDir+"orders-3.1.json")
	t.Setenv("DRAINER_ADAPTER", "orders")
	var out, errOut bytes.Buffer
	if code := execute([]string{"routes", "import"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "agent_safe: false") || out.Len() != 0 {
		t.Fatalf("agent_safe: false without --allow-unsafe: exit %d, out %s, err %s", code, out.String(), errOut.String())
	}
	out.Reset()
	errOut.Reset()
	t.Setenv("DRAINER_ALLOW_UNSAFE", "true")
	if code := execute([]string{"routes", "import"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), `adapter: "orders"`) ||
		!strings.Contains(out.String(), "routed because --allow-unsafe was given") {
		t.Fatalf("from env: exit %d, out %s, err %s", code, out.String(), errOut.String())
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"routes", "import", "--openapi", specDir + "broken.yaml", "--adapter", "x"}, "#/paths/~1charges/post: x-agent-idempotency.scope: missing"},
		{[]string{"routes", "import", "--openapi", specDir + "missing.yaml", "--adapter", "x"}, "read --openapi"},
		{[]string{"routes", "import", "--openapi", "../../examples/drainer.yaml", "--adapter", "x"}, "not an OpenAPI 3 document"},
	} {
		out.Reset()
		errOut.Reset()
		if code := execute(tc.args, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), tc.want) || out.Len() != 0 {
			t.Errorf("%v: exit %d, stderr %q, stdout %q; want 2 and %q", tc.args, code, errOut.String(), out.String(), tc.want)
		}
	}
}
