// Package config loads and validates the drainer configuration file (YAML).
//
// Errors name the file, the line of the offending key or value, and the field
// path (FILE:LINE[:COL]: field.path: message); every error is reported at once.
// ${env:X} and ${file:/path} expand inside string values; secret-bearing
// values (headers, database URLs, API keys) must come from such a reference,
// never from the config text.
package config
