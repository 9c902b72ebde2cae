//go:build unix

package pgtemp

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// runUser is the unprivileged account that runs the PostgreSQL binaries
// when the calling process is root. A nil *runUser means "run as the
// caller".
type runUser struct {
	name     string
	uid, gid uint32
}

// unprivilegedUsers are tried in order when the caller is root.
var unprivilegedUsers = []string{"postgres", "nobody"}

// lookupRunUser returns the account to run PostgreSQL as: nil unless the
// process is root, else the first of unprivilegedUsers that exists.
func lookupRunUser() (*runUser, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	var errs []error
	for _, name := range unprivilegedUsers {
		u, err := user.Lookup(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		uid, err := strconv.ParseUint(u.Uid, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("user %s: parse uid %q: %w", name, u.Uid, err)
		}
		gid, err := strconv.ParseUint(u.Gid, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("user %s: parse gid %q: %w", name, u.Gid, err)
		}
		return &runUser{name: name, uid: uint32(uid), gid: uint32(gid)}, nil
	}
	return nil, fmt.Errorf("running as root, PostgreSQL needs an unprivileged user but none of %s exists: %w",
		strings.Join(unprivilegedUsers, ", "), errors.Join(errs...))
}

// ownerOf returns the account owning path, for running pg_ctl against a
// cluster some other process created. It is nil unless the process is root.
func ownerOf(path string) (*runUser, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, fmt.Errorf("stat %s: no owner information", path)
	}
	if st.Uid == 0 {
		return nil, fmt.Errorf("%s is owned by root", path)
	}
	return &runUser{name: strconv.FormatUint(uint64(st.Uid), 10), uid: st.Uid, gid: st.Gid}, nil
}

func (u *runUser) String() string {
	if u == nil {
		return "current user"
	}
	return fmt.Sprintf("%s (uid %d)", u.name, u.uid)
}

// apply makes cmd run as u.
func (u *runUser) apply(cmd *exec.Cmd) {
	if u == nil {
		return
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid},
	}
}

// chown hands path to u.
func (u *runUser) chown(path string) error {
	if u == nil {
		return nil
	}
	return os.Chown(path, int(u.uid), int(u.gid))
}

// checkTraversable reports an error unless u can reach entries of dir,
// which needs search (x) permission on dir and all its ancestors.
// Permission bits are checked; ACLs and supplementary groups are not.
func (u *runUser) checkTraversable(dir string) error {
	if u == nil {
		return nil
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for {
		fi, err := os.Stat(dir)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil // cannot tell; let initdb report problems
		}
		var bit fs.FileMode
		switch {
		case st.Uid == u.uid:
			bit = 0o100
		case st.Gid == u.gid:
			bit = 0o010
		default:
			bit = 0o001
		}
		if fi.Mode().Perm()&bit == 0 {
			return fmt.Errorf("%s (mode %v) is not traversable by %s", dir, fi.Mode().Perm(), u)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil
		}
		dir = parent
	}
}

// processAlive reports whether a process with the given pid exists and,
// where /proc tells, is not a zombie waiting to be reaped.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	fields := procStat(pid)
	return len(fields) == 0 || fields[0] != "Z"
}

// processStartTime returns an opaque token identifying when process pid
// started (field 22 of /proc/<pid>/stat), or "" where that is unknown. Together
// with the pid it tells a live owner from an unrelated process that reused
// the pid.
func processStartTime(pid int) string {
	fields := procStat(pid)
	const startTimeField = 22 - 3 // procStat()[0] is field 3
	if len(fields) <= startTimeField {
		return ""
	}
	return fields[startTimeField]
}

// procStat returns the fields of /proc/<pid>/stat from the third (the
// process state) on, or nil where there is no such file.
func procStat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	// The command name (field 2) is parenthesised and may contain spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}
