package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, source revision and Go version",
		Long: `Print the module version of this binary, the source revision and time it
was built from (when the build recorded them) and the Go version.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bi, _ := debug.ReadBuildInfo()
			printVersion(cmd.OutOrStdout(), bi)
			return nil
		},
	}
}

// printVersion prints what bi records; bi is nil for a binary built
// without module support.
func printVersion(w io.Writer, bi *debug.BuildInfo) {
	version, goVersion := "(unknown)", runtime.Version()
	var revision, at, modified string
	if bi != nil {
		version, goVersion = bi.Main.Version, bi.GoVersion
		if version == "" {
			version = "(devel)"
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					modified = " (modified)"
				}
			}
		}
	}
	fmt.Fprintf(w, "neptune %s\n", version)
	if revision != "" {
		fmt.Fprintf(w, "revision %s%s\n", revision, modified)
	}
	if at != "" {
		fmt.Fprintf(w, "built from a commit of %s\n", at)
	}
	fmt.Fprintf(w, "%s %s/%s\n", goVersion, runtime.GOOS, runtime.GOARCH)
}
