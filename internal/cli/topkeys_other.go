//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package cli

import "os"

// cbreak is not available here: q quits after Enter.
func cbreak(*os.File) (func(), bool) { return func() {}, true }
