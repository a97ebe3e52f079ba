// Command neptune runs Neptune nodes, calls services, shows the cluster,
// and runs the demo, benchmarks and simulations.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/neptune-cluster/neptune/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdout)
	stop()
	os.Exit(code)
}
