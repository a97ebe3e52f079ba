package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/neptune-cluster/neptune"
)

// callOptions are the flags of `neptune call`.
type callOptions struct {
	join                         []string
	service, method, body, class string
	partition                    int
	timeout                      time.Duration
	sec                          securityFlags
}

func newCallCmd() *cobra.Command {
	var o callOptions
	cmd := &cobra.Command{
		Use:   "call --join host:port --service name --method name [flags]",
		Short: "Call one method and print the response",
		Long: `Call one method of a service partition through any node of the cluster
and print the response body. Whether the method reads or writes is what the
service declares; the call does not name it.`,
		Example: `  neptune call --tls-dir pki --join 127.0.0.1:7946 --service kv --partition 1 --method put --body k=v
  neptune call --tls-dir pki --cert client/web --join 127.0.0.1:7946 --service kv --partition 1 --method get --body k`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringSliceVar(&o.join, "join", nil, "gossip `host:port` of any node; list (required)")
	fs.StringVar(&o.service, "service", "", "service `name` (required)")
	fs.IntVar(&o.partition, "partition", 0, "partition `number`")
	fs.StringVar(&o.method, "method", "", "method `name` (required)")
	fs.StringVar(&o.body, "body", "", "request body as `text`")
	fs.StringVar(&o.class, "class", "", "service `class` of the request (see the service's classes)")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Second, "deadline for the call")
	o.sec.add(fs, "client/client", "your client")
	for _, f := range []string{"join", "service", "method"} {
		_ = cmd.MarkFlagRequired(f)
	}
	return cmd
}

func (o *callOptions) run(ctx context.Context, stdout io.Writer) error {
	sec, err := o.sec.clientFiles()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Join: o.join, Security: sec})
	if err != nil {
		return err
	}
	defer c.Close()
	if err := waitForService(ctx, c, o.service); err != nil {
		return err
	}
	resp, err := c.Call(ctx, o.service, o.partition, o.method, []byte(o.body), neptune.WithClass(o.class))
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
