//go:build linux || darwin || freebsd || netbsd || openbsd

package cli

import (
	"os"

	"golang.org/x/sys/unix"
)

// cbreak turns off line buffering and echo on the terminal f, if this
// process is in its foreground, and returns what restores it.
func cbreak(f *os.File) (restore func(), ok bool) {
	fd := int(f.Fd())
	if pg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP); err != nil || pg != unix.Getpgrp() {
		return nil, false
	}
	old, err := unix.IoctlGetTermios(fd, getTermios)
	if err != nil {
		return nil, false
	}
	t := *old
	t.Lflag &^= unix.ICANON | unix.ECHO
	t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, setTermios, &t); err != nil {
		return nil, false
	}
	return func() { _ = unix.IoctlSetTermios(fd, setTermios, old) }, true
}
