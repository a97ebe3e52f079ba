// Command neptune runs Neptune nodes, calls services and shows the cluster
// (the product's commands, internal/cli), and runs the demo, benchmarks and
// simulations (the lab's, lab/labcmd).
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
