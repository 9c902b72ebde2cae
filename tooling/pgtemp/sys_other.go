//go:build !unix

package pgtemp

import "os/exec"

// runUser is the account that runs the PostgreSQL binaries. Outside Unix
// pgtemp always runs them as the caller, so it is always nil.
type runUser struct{}

func lookupRunUser() (*runUser, error)           { return nil, nil }
func ownerOf(string) (*runUser, error)           { return nil, nil }
func (u *runUser) String() string                { return "current user" }
func (u *runUser) apply(*exec.Cmd)               {}
func (u *runUser) chown(string) error            { return nil }
func (u *runUser) checkTraversable(string) error { return nil }
func processStartTime(int) string                { return "" }

// processAlive conservatively reports every process as alive, so leaked
// clusters are never swept where liveness cannot be checked.
func processAlive(int) bool { return true }
