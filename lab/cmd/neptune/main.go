// Command neptune, built from the lab, is the product's command (every
// command of cmd/neptune, internal/cli) plus the lab's: the demo,
// benchmarks and simulations (lab/labcmd). It is what the README's
// `go run ./lab/cmd/neptune demo` runs and what the experiments' commands
// are built from; the shipped binary, cmd/neptune, links none of it.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/neptune-cluster/neptune/internal/cli"
	"github.com/neptune-cluster/neptune/lab/labcmd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Execute(ctx, os.Args[1:], labcmd.Commands()...)
	stop()
	os.Exit(code)
}
