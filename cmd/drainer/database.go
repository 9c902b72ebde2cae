package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/internal/catalog"
)

// resolveDatabase looks up --database NAME in the databases: section of
// --config and sets the URL from it, once. A static entry is found without
// connecting anywhere; other names are looked up in the catalog query. The
// config is loaded in check mode, so that secrets of other databases and of
// adapters need not be set; the URL of the database named must resolve.
// An unknown name is a usage error listing the known names (exit 2); a
// catalog that cannot be read is a runtime error (exit 1).
func (g *globals) resolveDatabase(ctx context.Context) error {
	if g.resolved || g.database == "" {
		if g.configPath != "" && g.database == "" && g.databaseURL == "" {
			return usagef("--config names the databases of a fleet: give --database NAME too")
		}
		return nil
	}
	switch {
	case g.databaseURL != "":
		return usagef("--database and --database-url are exclusive: give one")
	case g.configPath == "":
		return usagef("--database %s needs --config FILE (the config whose databases: section names it)", g.database)
	}
	dbs, err := loadDatabases(g.configPath)
	if err != nil {
		return err
	}
	url, err := lookupDatabase(ctx, dbs, g.database, loggerFrom(ctx))
	if err != nil {
		return err
	}
	g.databaseURL, g.resolved = url.Reveal(), true
	return nil
}

// loadDatabases loads the databases: section of a config file, in check
// mode; a config error or a missing section is a usage error.
func loadDatabases(path string) (*config.Databases, error) {
	cfg, err := config.Load(path, config.LoadOptions{Check: true})
	if err != nil {
		return nil, usageError{err}
	}
	if cfg.Databases == nil {
		return nil, usagef("%s has no databases: section", path)
	}
	return cfg.Databases, nil
}

// lookupDatabase returns the URL of the database called name.
func lookupDatabase(ctx context.Context, dbs *config.Databases, name string, log *slog.Logger) (config.Secret, error) {
	for _, e := range dbs.Static {
		if e.Name == name {
			url, err := e.ResolveURL()
			if err != nil {
				return "", usageError{err}
			}
			return url, nil
		}
	}
	known := dbs.DatabaseNames()
	if dbs.Query != nil {
		c := catalog.New(&config.Databases{Query: dbs.Query}, log)
		defer c.Close()
		list, err := c.List(ctx)
		for _, d := range list {
			if d.Name == name {
				return d.URL, nil
			}
			known = append(known, d.Name)
		}
		if err != nil {
			return "", fmt.Errorf("--database %s: not a static database, and the catalog could not be read: %w", name, err)
		}
	}
	slices.Sort(known)
	known = slices.Compact(known)
	msg := fmt.Sprintf("--database %s: unknown database", name)
	if s := config.Closest(name, known); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	}
	if len(known) == 0 {
		return "", usagef("%s; the config lists none", msg)
	}
	return "", usagef("%s; known databases: %s", msg, strings.Join(known, ", "))
}

// loggerFrom is the logger the root set up (see withLogger).
func loggerFrom(ctx context.Context) *slog.Logger {
	if log, ok := ctx.Value(loggerKey{}).(*slog.Logger); ok {
		return log
	}
	return slog.Default()
}
