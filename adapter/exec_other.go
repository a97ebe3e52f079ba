//go:build !unix

package adapter

import (
	"os"
	"os/exec"

	"github.com/neptune-cluster/neptune"
)

// killGroup is a no-op without process groups: cancellation kills the
// program itself (exec.CommandContext's default).
func killGroup(*exec.Cmd) {}

// childUsage is the program's CPU time; block I/O is not reported here.
func childUsage(ps *os.ProcessState) neptune.Usage {
	return neptune.Usage{CPU: ps.UserTime() + ps.SystemTime()}
}
