package config

import (
	"os"
)

// LoadOptions tunes Load and Parse. The zero value loads for `drainer run`.
type LoadOptions struct {
	// Check selects check mode (`drainer check`): an unset ${env:X} or an
	// unreadable ${file:…} is a warning in Config.Warnings instead of an
	// error, and the value it stands for is left empty and unchecked.
	Check bool
	// LookupEnv resolves ${env:NAME}; nil means os.LookupEnv.
	LookupEnv func(name string) (string, bool)
	// ReadFile resolves ${file:/path}; nil means reading the file (at most
	// 1 MiB).
	ReadFile func(path string) ([]byte, error)
}

func (o LoadOptions) withDefaults() LoadOptions {
	if o.LookupEnv == nil {
		o.LookupEnv = os.LookupEnv
	}
	if o.ReadFile == nil {
		o.ReadFile = readFileLimited
	}
	return o
}

// Load reads, expands and validates the config file at path. Any error it
// returns is an Errors listing every problem found, each located at the
// offending key or value (a file that cannot be read gives one Error
// without a line).
func Load(path string, opts LoadOptions) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, Errors{{File: path, Msg: "cannot read config file: " + describeReadError(err)}}
	}
	return Parse(path, data, opts)
}

// Parse expands and validates a config file's content; path is used in
// messages and as Config.Path. Defaults are applied to the fields the file
// leaves unset. Any error it returns is an Errors listing every problem.
func Parse(path string, data []byte, opts LoadOptions) (*Config, error) {
	opts = opts.withDefaults()
	d := newDecoder(path, opts)
	cfg := &Config{Path: path}
	d.decodeFile(data, cfg)

	v := &validator{file: path, src: d.src, cfg: cfg, untyped: d.untyped, check: opts.Check}
	if !d.failed {
		v.validate()
	}
	errs := append(d.errs, v.errs...)
	if len(errs) > 0 {
		return nil, errs.sort()
	}
	cfg.applyDefaults(d.src)
	for _, w := range append(d.warns, v.warns...).sort() {
		cfg.Warnings = append(cfg.Warnings, w.Error())
	}
	return cfg, nil
}
