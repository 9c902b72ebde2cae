package riverjob

import (
	"cmp"
	"log/slog"
	"regexp"
	"time"

	"github.com/drainer-io/drainer/dispatch/wire"
	"github.com/riverqueue/river"
)

// Defaults applied by Config.WithDefaults.
const (
	// DefaultJobKind is the kind of the jobs inserted when Config.JobKind is
	// empty; the workers register a worker for it.
	DefaultJobKind = "drainer_intent"
	// DefaultTimeout bounds one attempt when Config.Timeout is zero.
	DefaultTimeout = 10 * time.Second
)

// Names River accepts (river: client.go validateQueueName and the schema
// check of Config.validate; internal/rivercommon UserSpecifiedIDOrKindRE,
// which AddWorker checks a kind against).
var (
	queueName  = regexp.MustCompile(`^(?:[a-z0-9])+(?:[_|\-]?[a-z0-9]+)*$`)
	kindName   = regexp.MustCompile(`\A[\w][\w\-\[\]<>\/.·:+]+\z`)
	schemaName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

// maxSchemaLength is River's limit: a schema-qualified notification topic
// must fit in a 63-byte identifier.
const maxSchemaLength = 46

// Config configures one river adapter instance.
type Config struct {
	// DSN is the connection string of the database River's tables live in.
	// It is a secret: it never appears in errors.
	DSN string
	// Queue is the queue jobs are inserted into; "" means River's default
	// queue (river.QueueDefault).
	Queue string
	// JobKind is the kind of the inserted jobs; "" means DefaultJobKind.
	JobKind string
	// Schema is the schema River's tables live in (river.Config.Schema);
	// "" means the connection's search path.
	Schema string
	// Timeout bounds one attempt; the caller's deadline applies too.
	Timeout time.Duration
	// Logger receives River's own log lines; nil discards them.
	Logger *slog.Logger
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Queue = cmp.Or(c.Queue, river.QueueDefault)
	c.JobKind = cmp.Or(c.JobKind, DefaultJobKind)
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports every problem of c at once, each naming its field: the
// rules of the config file's keys (Settings.Check) and of the runtime
// fields. It never quotes the DSN.
func (c Config) Validate() error {
	ch := wire.NewChecker(nil)
	(&Settings{DSN: wire.Secret(c.DSN), Queue: c.Queue, JobKind: c.JobKind, Schema: c.Schema}).Check(ch)
	if c.Timeout <= 0 {
		ch.Errorf("timeout", "must be positive, got %s", c.Timeout)
	}
	return ch.Errs.Err()
}
