package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/neptune-cluster/neptune"
)

func runCall(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("call", "-join host:port -service S -partition P -method M [-body text]")
	var (
		service   = fs.String("service", "", "service name")
		partition = fs.Int("partition", 0, "partition number")
		method    = fs.String("method", "", "method name")
		body      = fs.String("body", "", "request body (text)")
		class     = fs.String("class", "", "service class")
		timeout   = fs.Duration("timeout", 5*time.Second, "deadline for the call")
		join      listFlag
	)
	fs.Var(&join, "join", "gossip address of any node; repeatable")
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case len(join) == 0:
		return usagef("-join is required: the gossip address of any node")
	case *service == "":
		return usagef("-service is required")
	case *method == "":
		return usagef("-method is required")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Join: join})
	if err != nil {
		return err
	}
	defer c.Close()
	if err := waitForService(ctx, c, *service); err != nil {
		return err
	}
	// The method's mode (read or write) is the one the service announces.
	resp, err := c.Call(ctx, *service, *partition, *method, []byte(*body), neptune.WithClass(*class))
	if err != nil {
		if neptune.Retryable(err) {
			return fmt.Errorf("%w (retryable)", err)
		}
		return err
	}
	fmt.Fprintf(stdout, "%s\n", resp.Body)
	return nil
}

// waitForService waits briefly until the yellow pages know some node
// hosting service, so a freshly dialled client does not report a service
// as unknown only because gossip has not reached it yet.
func waitForService(ctx context.Context, c *neptune.Client, service string) error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		for _, m := range c.Members(ctx, 0) {
			for _, s := range m.Services {
				if s.Name == service {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return nil // let the call report the precise error
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
