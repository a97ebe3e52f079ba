//go:build !unix

package adapter

import "os/exec"

// killGroup is a no-op without process groups: cancellation kills the
// program itself (exec.CommandContext's default).
func killGroup(*exec.Cmd) {}
