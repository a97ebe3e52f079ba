package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/neptune-cluster/neptune"
)

func newStatusCmd() *cobra.Command {
	var (
		join []string
		wait time.Duration
		sf   securityFlags
	)
	cmd := &cobra.Command{
		Use:   "status --join host:port [--wait 1s]",
		Short: "Print the yellow pages: nodes, services, partitions, load",
		Long: `Print the yellow pages as a client sees them: every node with its
services, partitions and polled load, then each replicated partition with
its primary, epoch and replica versions.`,
		Example: "  neptune status --tls-dir pki --join 127.0.0.1:7946",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			sec, err := sf.client()
			if err != nil {
				return err
			}
			c, err := neptune.Dial(ctx, neptune.ClientConfig{Join: join, Security: sec})
			if err != nil {
				return err
			}
			defer c.Close()
			if err := sleep(ctx, wait); err != nil {
				return err
			}
			stdout := cmd.OutOrStdout()
			printStatus(stdout, c.Members(ctx, 50*time.Millisecond))
			printPartitions(stdout, c.Partitions())
			return nil
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringSliceVar(&join, "join", nil, "gossip `host:port` of any node; list (required)")
	fs.DurationVar(&wait, "wait", time.Second, "how long to listen for announcements before printing")
	sf.add(fs, "client/client", "your client")
	_ = cmd.MarkFlagRequired("join")
	return cmd
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func printStatus(w io.Writer, members []neptune.Member) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tRPC\tMETRICS\tAGE\tSERVICE\tPARTITIONS\tLOAD")
	for _, m := range members {
		for i, s := range m.Services {
			node, rpc, metrics, age := m.Node, m.RPCAddr, m.MetricsAddr, m.Age.Round(time.Millisecond).String()
			if i > 0 {
				node, rpc, metrics, age = "", "", "", ""
			}
			if metrics == "" && i == 0 {
				metrics = "-"
			}
			var parts, loads []string
			for _, p := range s.Partitions {
				parts = append(parts, fmt.Sprint(p))
				if l := s.Load[p]; l >= 0 {
					loads = append(loads, fmt.Sprint(l))
				} else {
					loads = append(loads, "?")
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", node, rpc, metrics, age, s.Name, strings.Join(parts, ","), strings.Join(loads, ","))
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "%d nodes\n", len(members))
}
