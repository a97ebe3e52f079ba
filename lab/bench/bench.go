package cli

import (
	"fmt"
	"os"
)

// scratch returns this executable (which demos and benchmarks re-execute
// as nodes and helper processes) and a fresh temporary directory for their
// data and logs, with the function that removes it.
func scratch(prefix string) (exe, dir string, cleanup func(), err error) {
	if exe, err = os.Executable(); err != nil {
		return "", "", nil, fmt.Errorf("find the neptune executable: %w", err)
	}
	if dir, err = os.MkdirTemp("", prefix); err != nil {
		return "", "", nil, err
	}
	return exe, dir, func() { os.RemoveAll(dir) }, nil
}
