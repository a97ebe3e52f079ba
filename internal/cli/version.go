package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/neptune-cluster/neptune/internal/version"
)

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, source revision and Go version",
		Long: `Print the release of this binary, the source revision it was built from
(stamped by the build, see the Dockerfile; else what the Go toolchain
recorded), the module version when installed with go install, and the Go
version.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bi, _ := debug.ReadBuildInfo()
			printVersion(cmd.OutOrStdout(), bi)
			return nil
		},
	}
}

// printVersion prints the release, the revision (stamped by the build,
// else what the Go toolchain recorded) and the Go version; bi is nil for a
// binary built without module support.
func printVersion(w io.Writer, bi *debug.BuildInfo) {
	goVersion := runtime.Version()
	module, revision, at, modified := "", version.Commit, "", ""
	if bi != nil {
		goVersion = bi.GoVersion
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			module = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if revision == "" {
					revision = s.Value
				}
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					modified = " (modified)"
				}
			}
		}
	}
	fmt.Fprintf(w, "neptune %s\n", version.Release)
	if module != "" {
		fmt.Fprintf(w, "module %s\n", module)
	}
	if revision != "" {
		fmt.Fprintf(w, "revision %s%s\n", revision, modified)
	}
	if at != "" {
		fmt.Fprintf(w, "built from a commit of %s\n", at)
	}
	fmt.Fprintf(w, "%s %s/%s\n", goVersion, runtime.GOOS, runtime.GOARCH)
}
