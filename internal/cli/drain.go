package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// drainOptions are the flags of `neptune node drain`.
type drainOptions struct {
	join    []string
	node    string
	wait    time.Duration
	timeout time.Duration
	sec     securityFlags
}

func newNodeDrainCmd() *cobra.Command {
	var o drainOptions
	cmd := &cobra.Command{
		Use:   "drain --join host:port --node id",
		Short: "Drain a node: hand its primaries over, finish its calls, stop it",
		Long: `Drain a running node, as SIGTERM does: it reports itself not ready,
hands every primary role it holds to an in-sync replica, leaves the
gossip so clients stop choosing it, finishes its calls in flight and
stops (its process exits), within its --drain-timeout. The command
returns once the primary roles are handed over, naming the partitions
the node kept because no in-sync replica could take them (they elect a
primary once the node is gone).

Only an operator certificate (--cert operator/NAME) may drain a node.`,
		Example: "  neptune node drain --tls-dir pki --cert operator/alice --join 127.0.0.1:7946 --node n2",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	joinFlag(fs, &o.join)
	fs.StringVar(&o.node, "node", "", "`id` of the node to drain (required)")
	fs.DurationVar(&o.wait, "wait", time.Second, "how long to listen for announcements first")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "how long to wait for the hand-over")
	o.sec.add(fs, "operator/operator", "your operator")
	_ = cmd.MarkFlagRequired("join")
	_ = cmd.MarkFlagRequired("node")
	return cmd
}

func (o *drainOptions) run(ctx context.Context, out io.Writer) error {
	c, err := o.sec.dialAndListen(ctx, o.join, o.wait)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	start := time.Now()
	kept, err := c.Drain(ctx, o.node)
	if err != nil {
		return fmt.Errorf("drain %s: %w", o.node, err)
	}
	fmt.Fprintf(out, "node %s handed its primaries over in %v and is finishing its calls in flight, then stops\n", o.node, time.Since(start).Round(time.Millisecond))
	if len(kept) > 0 {
		fmt.Fprintf(out, "kept (no in-sync replica to take over; elected elsewhere once it is gone): %s\n", strings.Join(kept, ", "))
	}
	return nil
}
