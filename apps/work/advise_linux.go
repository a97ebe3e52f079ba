package work

import (
	"os"

	"golang.org/x/sys/unix"
)

// adviseRandom turns f's readahead off: a read that misses the page cache
// reads its own pages, not the ones after them.
func adviseRandom(f *os.File) error {
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_RANDOM)
}
