package pgtemp

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// unmarkedGrace is how old a cluster directory without a readable marker
// must be before the sweep takes it for abandoned. The marker is written
// right after the directory is created, so only a crash in between (or a
// foreign directory) leaves one without.
const unmarkedGrace = 10 * time.Minute

// writeMarker records the calling process as the owner of the cluster
// directory root: "<pid> <start time>\n".
func writeMarker(root string) error {
	pid := os.Getpid()
	content := fmt.Sprintf("%d %s\n", pid, processStartTime(pid))
	if err := os.WriteFile(filepath.Join(root, markerFile), []byte(content), 0o644); err != nil {
		return fmt.Errorf("write owner marker: %w", err)
	}
	return nil
}

// ownerState is what the marker of a cluster directory says about its owner.
type ownerState int

const (
	ownerAlive ownerState = iota
	ownerGone
	ownerUnknown // no readable marker
)

// readOwner reports whether the process that created the cluster directory
// root still exists.
func readOwner(root string) (ownerState, int) {
	b, err := os.ReadFile(filepath.Join(root, markerFile))
	if err != nil {
		return ownerUnknown, 0
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return ownerUnknown, 0
	}
	pid, err := strconv.Atoi(fields[0])
	if err != nil || pid <= 0 {
		return ownerUnknown, 0
	}
	if !processAlive(pid) {
		return ownerGone, pid
	}
	// A live process with that pid may be an unrelated one that reused it.
	if len(fields) > 1 && fields[1] != "" {
		if now := processStartTime(pid); now != "" && now != fields[1] {
			return ownerGone, pid
		}
	}
	return ownerAlive, pid
}

// sweep stops and removes the clusters under parent whose owning process
// no longer exists. It is best effort: problems are logged at debug level
// and otherwise ignored.
func sweep(ctx context.Context, logger *slog.Logger, parent string, bins binaries) {
	roots, err := filepath.Glob(filepath.Join(parent, dirPattern))
	if err != nil {
		logger.Debug("pgtemp: sweep: list cluster directories", "err", err)
		return
	}
	for _, root := range roots {
		if ctx.Err() != nil {
			return
		}
		fi, err := os.Lstat(root)
		if err != nil || !fi.IsDir() {
			continue
		}
		state, pid := readOwner(root)
		switch {
		case state == ownerAlive:
			continue
		case state == ownerUnknown && time.Since(fi.ModTime()) < unmarkedGrace:
			continue
		}
		if err := sweepOne(ctx, bins, root); err != nil {
			logger.Debug("pgtemp: sweep: could not remove leaked cluster", "dir", root, "owner_pid", pid, "err", err)
			continue
		}
		logger.Debug("pgtemp: sweep: removed leaked cluster", "dir", root, "owner_pid", pid)
	}
}

// sweepOne stops the server of the leaked cluster directory root, if it
// runs, and removes the directory.
func sweepOne(ctx context.Context, bins binaries, root string) error {
	dataDir := filepath.Join(root, dataSubdir)
	if _, ok := postmasterPID(dataDir); ok {
		runAs, err := ownerOf(dataDir)
		if err != nil {
			return fmt.Errorf("find the cluster's user: %w", err)
		}
		ctx, cancel := context.WithTimeout(ctx, stopTimeout)
		defer cancel()
		if err := stopServer(ctx, bins, runAs, dataDir, "immediate"); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(root); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
