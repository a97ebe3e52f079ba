// Package cli implements the neptune command's product commands (node,
// call, status, top, partition, version, completion) on cobra. Other command
// trees, such as the lab's benchmarks and simulations, are passed to
// Execute and follow the same conventions: help on stdout with exit 0,
// errors on stderr, exit 2 for usage errors.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit codes of Execute, documented in the root command's help.
const (
	ExitOK     = 0 // the command succeeded, or help was printed
	ExitFailed = 1 // the command ran and failed
	ExitUsage  = 2 // bad command line: unknown command or flag, bad or missing argument
)

const rootLong = `Neptune turns a single-machine service into a partitioned, replicated,
load-balanced cluster service.

Flags are GNU style (--join host:port); list flags take comma-separated
values or repeat (--join a,b or --join a --join b). Go-style single-dash
long flags (-join) are accepted as well.

Exit status:
  0  success, or help was printed (-h, --help)
  1  the command ran and failed (a failed call, an unreachable cluster,
     an invalid config file)
  2  usage error: unknown command or flag, bad or missing argument

Every flag can also be set by an environment variable, NEPTUNE_ and its
name in capitals with - as _ (--tls-dir: NEPTUNE_TLS_DIR), shown in each
command's help. The command line wins over the variable, the variable
over a config file's key.`

// Execute builds the neptune command with the product commands and extra,
// runs it on args (without the program name) and returns the exit code
// (ExitOK, ExitFailed or ExitUsage).
func Execute(ctx context.Context, args []string, extra ...*cobra.Command) int {
	return execute(ctx, args, os.Stdout, os.Stderr, extra...)
}

func execute(ctx context.Context, args []string, stdout, stderr io.Writer, extra ...*cobra.Command) int {
	return executeIn(ctx, args, nil, stdout, stderr, extra...)
}

// executeIn is execute reading stdin (nil: the process's).
func executeIn(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, extra ...*cobra.Command) int {
	root := newRoot(extra...)
	if stdin != nil {
		root.SetIn(stdin)
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	// Add cobra's help and completion commands now rather than during
	// execution, so prepare gives them the same error handling.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd(args...)
	prepare(root)
	envDocs := map[*pflag.Flag]bool{}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		documentEnv(c, envDocs)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	root.SetArgs(gnuArgs(root, args))
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	if cmd == nil {
		cmd = root
	}
	var f *failure
	code := ExitUsage
	if errors.As(err, &f) {
		err, code = f.err, ExitFailed
	}
	var ue *UsageError
	if errors.As(err, &ue) {
		code = ExitUsage
	}
	fmt.Fprintf(stderr, "%s: %s\n", cmd.CommandPath(), flagWords(err.Error()))
	if code == ExitUsage {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return code
}

// goFields names, in the library's errors, the Go fields the CLI sets
// from flags and config keys: a user of the command line reads the flag
// and the key instead (longest first, so a whole phrase wins).
var goFields = strings.NewReplacer(
	"(ClientConfig.Host, --host)", "(--host)",
	"(ClientConfig.Advertise, --advertise)", "(--advertise)",
	"(NodeConfig.Host, --host)", "(host, --host)",
	"(NodeConfig.Advertise, --advertise)", "(advertise, --advertise)",
	"(NodeConfig.DataDir, ID, Cluster)", "(data_dir/--data-dir, id/--id, security.cluster/--cluster)",
	"NodeConfig.Cluster (or NodeConfig.Security.Cluster)", "security.cluster (--cluster)",
	"ClientConfig.Security.Dir", "--tls-dir",
	"ClientConfig.Security.Cert", "--cert",
	"ClientConfig.Security.Insecure", "--insecure",
	"ClientConfig.Security.KeyringFile", "--keyring",
	"ClientConfig.Security.Cluster", "--cluster",
	"NodeConfig.Security.KeyringFile", "security.keyring (--keyring)",
	"NodeConfig.Security.Dir", "security.tls_dir (--tls-dir)",
	"NodeConfig.Security.Insecure", "security.insecure (--insecure)",
	"NodeConfig.Security.Cluster", "security.cluster (--cluster)",
	"NodeConfig.Security", "security (--tls-dir, --keyring)",
	"NodeConfig.Cluster", "security.cluster (--cluster)",
	"NodeConfig.DataDir", "data_dir (--data-dir)",
	"NodeConfig.ID", "id (--id)",
	"NodeConfig.Placement", "placement",
	"NodeConfig.ServiceBalance", "balance.services (--balance-service)",
	"NodeConfig.Balance", "balance",
	"NodeConfig.AnnounceInterval", "announce_interval (--announce-interval)",
	"NodeConfig.AnnounceTTL", "announce_ttl (--announce-ttl)",
	"NodeConfig.MaxMessageBytes", "the node's message size limit",
	"ClientConfig.MaxMessageBytes", "the client's message size limit",
	"ClientConfig.Security", "--tls-dir, --cert",
	"ClientConfig.Join", "--join",
)

// replicationField is a Go field of neptune.Replication in an error, as
// the replication block's YAML key (Replication.MinLive: min_live).
var replicationField = regexp.MustCompile(`\bReplication\.([A-Z][A-Za-z]*)`)

// flagWords rewrites an error message for the command line: Go fields
// become the flags and config keys that set them.
func flagWords(msg string) string {
	msg = goFields.Replace(msg)
	return replicationField.ReplaceAllStringFunc(msg, func(m string) string {
		return "replication." + snake(strings.TrimPrefix(m, "Replication."))
	})
}

// snake turns a Go name into a YAML key: MinLive is min_live.
func snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// newRoot builds the root command with the product commands and extra.
func newRoot(extra ...*cobra.Command) *cobra.Command {
	root := &cobra.Command{
		Use:   "neptune",
		Short: "Neptune: partitioned, replicated, load-balanced cluster services",
		Long:  rootLong,
		// Execute prints errors and picks the exit code; usage is printed
		// for -h only, not after every error.
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &UsageError{err} })
	root.AddCommand(newNodeCmd(), newCallCmd(), newStatusCmd(), newPartitionCmd(), newBackupCmd(), newRestoreCmd(), newDebugCmd(), newVersionCmd(), newTLSCmd(), newKeyringCmd(), newGatewayCmd(), newTopCmd(), newHealthCmd())
	root.AddCommand(extra...)
	return root
}

// UsageError marks bad command-line input; Execute exits 2 for it.
// Commands return it (via Usagef) for invalid flag values that the flag
// parser cannot catch.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }

func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a *UsageError with a formatted message.
func Usagef(format string, args ...any) error {
	return &UsageError{fmt.Errorf(format, args...)}
}

// failure wraps an error a command returned while running (exit 1 unless
// it is a *UsageError). Errors cobra returns itself, from parsing flags,
// arguments and required flags, are not wrapped: those are usage errors.
type failure struct{ err error }

func (f *failure) Error() string { return f.err.Error() }

func (f *failure) Unwrap() error { return f.err }

// prepare walks the command tree: it sets flags from their environment
// variables (EnvName) before a command runs, marks errors that commands
// return while running (see failure), and makes commands that only group others
// print their help when called bare and reject unknown subcommands.
func prepare(c *cobra.Command) {
	c.PersistentPreRunE = ranE(c.PersistentPreRunE)
	c.PreRunE = withEnv(ranE(c.PreRunE))
	c.RunE = ranE(c.RunE)
	c.PostRunE = ranE(c.PostRunE)
	c.PersistentPostRunE = ranE(c.PersistentPostRunE)
	if !c.Runnable() && c.HasSubCommands() && c.HasParent() {
		c.Args = unknownSubcommand
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	}
	for _, sub := range c.Commands() {
		prepare(sub)
	}
}

func ranE(run func(*cobra.Command, []string) error) func(*cobra.Command, []string) error {
	if run == nil {
		return nil
	}
	return func(cmd *cobra.Command, args []string) error {
		if err := run(cmd, args); err != nil {
			return &failure{err}
		}
		return nil
	}
}

// unknownSubcommand rejects any argument of a command that only groups
// subcommands, suggesting the closest names.
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return errors.New(msg)
}

// noArgs rejects positional arguments of a command that takes none.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected argument %q", args[0])
	}
	return nil
}

// gnuArgs rewrites Go-style single-dash long flags (-join x) to GNU style
// (--join x), so scripts and re-launched processes written for the flag
// package the CLI used before keep working. Only names the selected
// command defines are rewritten; shorthands (-h), values and everything
// after "--" are left alone, as are the arguments of commands that parse
// their own flags.
func gnuArgs(root *cobra.Command, args []string) []string {
	out := make([]string, 0, len(args))
	cmd, positional := root, false
	for i := 0; i < len(args); i++ {
		a := args[i]
		out = append(out, a)
		switch {
		case a == "--" || cmd.DisableFlagParsing:
			return append(out, args[i+1:]...)
		case !strings.HasPrefix(a, "-") || a == "-":
			if !positional {
				if sub := subcommand(cmd, a); sub != nil {
					cmd = sub
					continue
				}
			}
			positional = true
			continue
		}
		long := strings.HasPrefix(a, "--")
		name, _, hasValue := strings.Cut(strings.TrimPrefix(a[1:], "-"), "=")
		var f *pflag.Flag
		switch {
		case long:
			f = lookupFlag(cmd, name)
		case len(name) == 1:
			f = shorthandFlag(cmd, name)
		default:
			if f = lookupFlag(cmd, name); f != nil {
				out[len(out)-1] = "-" + a
			}
		}
		if f == nil {
			continue
		}
		if !hasValue && f.NoOptDefVal == "" && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return out
}

func subcommand(cmd *cobra.Command, name string) *cobra.Command {
	for _, c := range cmd.Commands() {
		if c.Name() == name || c.HasAlias(name) {
			return c
		}
	}
	return nil
}

func lookupFlag(cmd *cobra.Command, name string) *pflag.Flag {
	if name == "help" {
		cmd.InitDefaultHelpFlag()
	}
	if f := cmd.Flags().Lookup(name); f != nil {
		return f
	}
	return cmd.InheritedFlags().Lookup(name)
}

func shorthandFlag(cmd *cobra.Command, name string) *pflag.Flag {
	if f := cmd.Flags().ShorthandLookup(name); f != nil {
		return f
	}
	return cmd.InheritedFlags().ShorthandLookup(name)
}
