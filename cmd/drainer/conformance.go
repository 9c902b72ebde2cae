package main

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/drainer-io/drainer/internal/conformance"
	"github.com/spf13/cobra"
)

// Output formats of `drainer conformance`.
const (
	outputText = "text"
)

// conformanceOpts are the flags of `drainer conformance`.
type conformanceOpts struct {
	url, method, payload, mode, output string
	headers                            []string
	concurrency                        int
	timeout                            time.Duration
}

func newConformanceCmd() *cobra.Command {
	var o conformanceOpts
	cmd := &cobra.Command{
		Use:   "conformance --url URL [--method M] [--payload JSON] [--header K=V ...] [--mode seed|ietf] [--concurrency N]",
		Short: "Probe a provider endpoint for the replay contract drainer's retries rely on",
		Long: `Sends requests with fresh random idempotency keys to the one URL given (never
following a redirect) and prints one line per check, PASS or FAIL, with what
was seen:

  first-write       a fresh key answers 2xx, Idempotency-Replay false or absent
  replay            the same request again: 200 (ietf: the first status), the
                    replay marker, the first body byte for byte
  payload-mismatch  the same key, another body: 409 with
                    Idempotency-Conflict: payload-mismatch (ietf: 422)
  in-flight         --concurrency identical requests at once, each over its own
                    connection: one first write, every other a replay or 409
                    (seed also 425) with Idempotency-Conflict: in-flight and
                    Retry-After (ietf: 409 and Retry-After)
  one-effect        the same bursts counted: one non-replay success per key,
                    and a later retry replays it
  missing-key       no Idempotency-Key: 400
  tuple-mismatch    an X-Agent-Idempotency-Tuple that does not match the key: 400

Keys are idem_v1_ keys of random tuples, sent with their matching tuple
header. Exit 0 when every check passes, 1 when one fails, 2 on a usage error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			co, err := o.options(cmd)
			if err != nil {
				return err
			}
			rep, err := conformance.Run(cmd.Context(), co)
			var oe *conformance.OptionError
			if errors.As(err, &oe) {
				return usageError{flagNames(cmd, err)}
			}
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if o.output == outputJSON {
				err = rep.WriteJSON(w)
			} else {
				err = rep.WriteText(w)
			}
			if err != nil {
				return err
			}
			if failed := rep.Failed(); len(failed) > 0 {
				names := make([]string, len(failed))
				for i, c := range failed {
					names[i] = string(c)
				}
				return fmt.Errorf("conformance: %d of %d checks failed against %s: %s",
					len(failed), len(rep.Checks), rep.URL, strings.Join(names, ", "))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.url, "url", "", "the endpoint to probe, http or https (env DRAINER_URL)")
	f.StringVar(&o.method, "method", conformance.DefaultMethod, "HTTP method of every request")
	f.StringVar(&o.payload, "payload", "", "request body: JSON, @FILE or - for standard input (default {})")
	f.StringArrayVar(&o.headers, "header", nil, "header sent with every request, Name=value (repeatable; e.g. Authorization=...)")
	f.StringVar(&o.mode, "mode", string(conformance.ModeSeed), "answers expected: seed or ietf")
	f.IntVar(&o.concurrency, "concurrency", conformance.DefaultConcurrency, "identical requests sent at once for in-flight and one-effect")
	f.DurationVar(&o.timeout, "timeout", conformance.DefaultTimeout, "deadline of each request")
	f.StringVar(&o.output, "output", outputText, "output format: text (one line per check; table is the same) or json")
	return cmd
}

// options turns the flags into conformance.Options; a problem is a usage
// error naming the flag.
func (o conformanceOpts) options(cmd *cobra.Command) (conformance.Options, error) {
	switch o.output {
	case outputText, outputTable, outputJSON:
		// table: what DRAINER_OUTPUT may hold for the operator commands.
	default:
		return conformance.Options{}, usagef("%s: %q is not text or json", flagRef(cmd, "output"), o.output)
	}
	mode, err := conformance.ParseMode(o.mode)
	if err != nil {
		return conformance.Options{}, usagef("%s: %v", flagRef(cmd, "mode"), err)
	}
	if o.timeout <= 0 {
		return conformance.Options{}, usagef("%s: must be positive, got %s", flagRef(cmd, "timeout"), o.timeout)
	}
	// The engine reads a concurrency of 0 as its default; here the default
	// is the flag's (10), so a 0 given is refused like any other value out
	// of range (which the engine refuses, with the other options' errors).
	if o.concurrency == 0 {
		return conformance.Options{}, usagef("%s: %d is outside 2..%d", flagRef(cmd, "concurrency"), o.concurrency, conformance.MaxConcurrency)
	}
	h := http.Header{}
	for i, arg := range o.headers {
		name, value, err := conformance.ParseHeader(arg)
		if err != nil {
			return conformance.Options{}, usagef("%s (#%d): %v", flagRef(cmd, "header"), i+1, err)
		}
		h.Add(name, value)
	}
	payload, err := readPayload(o.payload, cmd.InOrStdin())
	if err != nil {
		return conformance.Options{}, err
	}
	return conformance.Options{
		URL: o.url, Method: o.method, Payload: payload, Header: h,
		Mode: mode, Concurrency: o.concurrency, Timeout: o.timeout,
	}, nil
}

// flagNames renders the engine's option errors with their flag names
// ("url: ..." becomes "--url: ...", or "DRAINER_URL: ..." when the value
// came from the environment).
func flagNames(cmd *cobra.Command, err error) error {
	var lines []string
	for _, e := range unjoin(err) {
		var oe *conformance.OptionError
		if errors.As(e, &oe) {
			lines = append(lines, flagRef(cmd, oe.Field)+": "+oe.Err.Error())
		} else {
			lines = append(lines, e.Error())
		}
	}
	return errors.New(strings.Join(lines, "\n"))
}

// unjoin returns the errors joined in err (err itself when not joined).
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
