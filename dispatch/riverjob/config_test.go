package riverjob

import (
	"strings"
	"testing"
	"time"
)

func TestConfigWithDefaults(t *testing.T) {
	c := Config{DSN: "x"}.WithDefaults()
	if c.Queue != "default" || c.JobKind != DefaultJobKind || c.Timeout != DefaultTimeout || c.Logger == nil || c.Schema != "" {
		t.Errorf("defaults: %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	const secret = "pw-in-dsn"
	valid := Config{DSN: "postgres://u:" + secret + "@h/db", Queue: "intents", JobKind: "drainer.intent", Schema: "river", Timeout: time.Second}
	tests := []struct {
		name string
		edit func(*Config)
		want []string
	}{
		{"valid", func(*Config) {}, nil},
		{"kind with brackets", func(c *Config) { c.JobKind = "agent[v2]/intent" }, nil},
		{"no dsn", func(c *Config) { c.DSN = "" }, []string{"dsn: required"}},
		{"bad queue", func(c *Config) { c.Queue = "Intents Queue" }, []string{`queue: must be a River queue name`}},
		{"long queue", func(c *Config) { c.Queue = strings.Repeat("q", 65) }, []string{"queue:"}},
		{"short kind", func(c *Config) { c.JobKind = "k" }, []string{"job_kind:"}},
		{"kind with space", func(c *Config) { c.JobKind = "my kind" }, []string{"job_kind:"}},
		{"bad schema", func(c *Config) { c.Schema = "river-jobs" }, []string{"schema:"}},
		{"long schema", func(c *Config) { c.Schema = strings.Repeat("s", 47) }, []string{"schema:"}},
		{"timeout", func(c *Config) { c.Timeout = 0 }, []string{"timeout: must be positive"}},
		{"all at once", func(c *Config) { c.DSN = ""; c.Queue = "-"; c.Timeout = -1 }, []string{"dsn:", "queue:", "timeout:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid
			tt.edit(&c)
			err := c.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want %q", err, w)
				}
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("Validate() reveals the DSN: %v", err)
			}
		})
	}
}
