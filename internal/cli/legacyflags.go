package cli

import (
	"errors"
	"flag"
	"fmt"
)

// The helpers below serve the benchmark, demo and simulation verbs, which
// still parse their flags with the standard flag package. The product
// commands do not use them; they go with those verbs.

// usageError marks bad command-line input (exit code 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// newFlags returns a flag set that reports errors instead of exiting.
func newFlags(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("neptune "+name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: neptune %s %s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args, turning flag errors into usage errors.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	return nil
}
