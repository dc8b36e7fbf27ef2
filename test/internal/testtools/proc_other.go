//go:build !linux

package testtools

import "os/exec"

// killWithParent does nothing where there is no parent-death signal: the
// tests' cleanups still stop their processes.
func killWithParent(*exec.Cmd) {}
