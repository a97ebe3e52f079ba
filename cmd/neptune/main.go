// Command neptune runs Neptune nodes, calls services and shows the cluster.
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
