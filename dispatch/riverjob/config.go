package riverjob

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

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

// Validate reports every problem of c at once, each naming its field. It
// never quotes the DSN.
func (c Config) Validate() error {
	var errs []error
	if c.DSN == "" {
		errs = append(errs, errors.New("dsn: required"))
	}
	if len(c.Queue) > 64 || !queueName.MatchString(c.Queue) {
		errs = append(errs, fmt.Errorf("queue: must be a River queue name (at most 64 lower-case letters and digits separated by _ or -), got %q", c.Queue))
	}
	if !kindName.MatchString(c.JobKind) {
		errs = append(errs, fmt.Errorf("job_kind: must match %s (River's job kind syntax), got %q", kindName, c.JobKind))
	}
	if c.Schema != "" && (len(c.Schema) > maxSchemaLength || !schemaName.MatchString(c.Schema)) {
		errs = append(errs, fmt.Errorf("schema: must be a plain identifier of at most %d characters, got %q", maxSchemaLength, c.Schema))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("timeout: must be positive, got %s", c.Timeout))
	}
	return errors.Join(errs...)
}
