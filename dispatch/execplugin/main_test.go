package execplugin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"go.uber.org/goleak"
)

// echoBin is examples/plugin-echo, built once for the package's tests.
var echoBin string

// TestMain builds the example plugin, runs the tests, and fails the package
// if a test leaves a goroutine behind (go-plugin's log and RPC goroutines
// included: Close must reap them).
func TestMain(m *testing.M) {
	if os.Getenv(parentEnv) != "" {
		runParent()
		return
	}
	dir, err := os.MkdirTemp("", "execplugin-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	echoBin = filepath.Join(dir, "plugin-echo")
	build := exec.Command(goTool(), "build", "-o", echoBin, "github.com/drainer-io/drainer/examples/plugin-echo")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build examples/plugin-echo:", err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { _ = os.RemoveAll(dir) }))
}

// goTool returns the go command of the toolchain running the tests.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// parentEnv makes the test binary a stand-in daemon (runParent).
const parentEnv = "EXECPLUGIN_TEST_PARENT"

// runParent starts a long-lived child as the runner starts a plugin,
// prints its pid and waits to be killed.
func runParent() {
	cmd := exec.Command("sleep", "600")
	isolate(cmd)
	if err := cmd.Start(); err != nil {
		fmt.Println("start:", err)
		os.Exit(1)
	}
	fmt.Println(cmd.Process.Pid)
	select {}
}
