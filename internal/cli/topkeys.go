package cli

import (
	"bufio"
	"context"
	"io"
	"os"
)

// watchQuit reads in until q (or Q) is typed, then cancels: how a user
// leaves `neptune top`, besides Ctrl-C. On a terminal in the foreground
// the keypress counts at once (no echo, no Enter: the terminal is put in
// cbreak mode, and restore puts it back); from a pipe, a q in the input
// quits. A terminal top does not own (top run in the background) is not
// read: that would stop the process.
func watchQuit(in io.Reader, cancel context.CancelFunc) (restore func()) {
	restore = func() {}
	if f, ok := in.(*os.File); ok && isTerminal(f) {
		r, ok := cbreak(f)
		if !ok {
			return restore
		}
		restore = r
	}
	go func() {
		br := bufio.NewReader(in)
		for {
			b, err := br.ReadByte()
			if err != nil {
				return
			}
			if b == 'q' || b == 'Q' {
				cancel()
				return
			}
		}
	}()
	return restore
}
