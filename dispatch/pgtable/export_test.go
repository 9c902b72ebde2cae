package pgtable

import "testing"

// NewTestTable returns the URL of a fresh database holding the recipient
// table named table (RecipientTableDDL), for the external tests.
func NewTestTable(t *testing.T, table string) string {
	db := newTestDB(t)
	db.createTable(t, table)
	return db.url
}
