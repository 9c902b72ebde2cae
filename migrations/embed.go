package migrations

import "embed"

//go:embed *.sql
var files embed.FS
