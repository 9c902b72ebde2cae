package execplugin

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPluginDiesWithTheDaemon: a daemon killed without stopping its plugin
// (SIGKILL) takes the plugin with it; otherwise the plugin, in a process
// group of its own, would run on, and the restarted daemon would start a
// second instance beside it.
func TestPluginDiesWithTheDaemon(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	parent := exec.Command(self)
	parent.Env = append(os.Environ(), parentEnv+"=1")
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	pid, perr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || perr != nil {
		_ = parent.Process.Kill()
		t.Fatalf("the stand-in daemon said %q (%v, %v)", line, err, perr)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if !running(pid) {
		t.Fatalf("plugin %d is not running before the daemon is killed", pid)
	}
	if err := parent.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	// A generous bound for "it did not outlive the daemon", not a timing.
	for deadline := time.Now().Add(time.Minute); running(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("plugin %d still runs a minute after its daemon was killed", pid)
		}
	}
}

// running reports whether pid is a live process (a zombie is not).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}
