// Command neptune runs Neptune nodes and gateways, calls services and shows
// and operates the cluster (internal/cli). It is the shipped binary and
// links no lab code; the demo, benchmarks and simulations are in the lab's
// build of the same command, lab/cmd/neptune.
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
	code := cli.Execute(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
