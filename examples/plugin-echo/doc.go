// Command plugin-echo is an example drainer adapter plugin (type: plugin).
// It "delivers" a row by appending one JSON line to a file, idempotently by
// the row's key: a key already in the file is answered as a replay when the
// payload is the same, and as terminal (payload mismatch) when it is not. The
// file is read back at start, so keys survive restarts.
//
// Usage (started by drainer, never by hand):
//
//	plugin-echo --out /var/lib/drainer/echo.jsonl [--tag TEXT] [--key-ttl DURATION]
//	            [--faults FILE] [--started FILE]
//
// --out defaults to $DRAINER_PLUGIN_ECHO_OUT; --tag is stored in every
// record (an environment name, say). For testing drainer, payloads
// {"fail":"transient"}, {"fail":"terminal"}, {"fail":"hang"} and
// {"fail":"crash"} answer retry, answer terminal, wait until the attempt's
// deadline, and exit the process with status 3. --faults names a file of
// fault names (transient, terminal, hang, crash), one per line: each dispatch
// consumes the first line and fails that way, whatever its payload. --started
// names a file the plugin appends its pid to when it starts. --key-ttl makes
// the plugin report that idempotency window to drainer.
//
// # Files
//
//	main.go    flags, the output file read back (load), Dispatch (faults),
//	           deliver (append, replay or payload_mismatch), the reported key TTL
//	README.md  how to build, pin and configure the plugin
package main
