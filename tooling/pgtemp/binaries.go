package pgtemp

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ErrNoBinaries is wrapped by the error [Start] returns when it cannot find
// the PostgreSQL server binaries; callers typically fall back to another
// way of getting a server (Docker, an external URL).
var ErrNoBinaries = errors.New("PostgreSQL server binaries not found")

// debianBinGlob is where Debian and Ubuntu install the binaries of each
// PostgreSQL major version.
const debianBinGlob = "/usr/lib/postgresql/*/bin"

// binaries are the absolute paths of the programs pgtemp runs.
type binaries struct {
	initdb, pgCtl, postgres string
}

// findBinaries looks for initdb, pg_ctl and postgres on PATH, then in the
// highest-versioned directory matching debianBinGlob that has all three.
func findBinaries() (binaries, error) {
	if b, err := binariesOnPath(); err == nil {
		return b, nil
	}
	dirs, _ := filepath.Glob(debianBinGlob) // the pattern is valid
	slices.SortFunc(dirs, func(a, b string) int {
		return -compareVersions(filepath.Base(filepath.Dir(a)), filepath.Base(filepath.Dir(b)))
	})
	for _, dir := range dirs {
		b := binaries{
			initdb:   filepath.Join(dir, "initdb"),
			pgCtl:    filepath.Join(dir, "pg_ctl"),
			postgres: filepath.Join(dir, "postgres"),
		}
		if isExecutable(b.initdb) && isExecutable(b.pgCtl) && isExecutable(b.postgres) {
			return b, nil
		}
	}
	return binaries{}, fmt.Errorf("%w: initdb, pg_ctl and postgres are not all on PATH (%s) nor in any %s",
		ErrNoBinaries, os.Getenv("PATH"), debianBinGlob)
}

func binariesOnPath() (binaries, error) {
	var b binaries
	for _, p := range []struct {
		name string
		dst  *string
	}{{"initdb", &b.initdb}, {"pg_ctl", &b.pgCtl}, {"postgres", &b.postgres}} {
		path, err := exec.LookPath(p.name)
		if err != nil {
			return binaries{}, err
		}
		if path, err = filepath.Abs(path); err != nil {
			return binaries{}, err
		}
		*p.dst = path
	}
	return b, nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// compareVersions compares dotted version strings such as "9.6" and "16"
// numerically, component by component; non-numeric components sort first.
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		x, y := -1, -1
		if i < len(as) {
			if n, err := strconv.Atoi(as[i]); err == nil {
				x = n
			}
		}
		if i < len(bs) {
			if n, err := strconv.Atoi(bs[i]); err == nil {
				y = n
			}
		}
		if x != y {
			return x - y
		}
	}
	return strings.Compare(a, b)
}
