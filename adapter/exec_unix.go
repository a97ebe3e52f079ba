//go:build unix

package adapter

import (
	"os"
	"os/exec"
	"syscall"

	"github.com/neptune-cluster/neptune"
)

// killGroup runs cmd in its own process group and makes cancellation kill
// the whole group, so a shell script's children die with it.
func killGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}

// childUsage is what a finished program used, from its rusage: user and
// system CPU time, and block I/O (inblock/oublock count 512-byte blocks).
func childUsage(ps *os.ProcessState) neptune.Usage {
	u := neptune.Usage{CPU: ps.UserTime() + ps.SystemTime()}
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok && ru != nil {
		u.DiskRead, u.DiskWrite = ru.Inblock*512, ru.Oublock*512
	}
	return u
}
