package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/neptune-cluster/neptune"
)

func runStatus(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("status", "-join host:port")
	wait := fs.Duration("wait", time.Second, "how long to listen for announcements before printing")
	var join listFlag
	fs.Var(&join, "join", "gossip address of any node; repeatable")
	if err := parse(fs, args); err != nil {
		return err
	}
	if len(join) == 0 {
		return usagef("-join is required: the gossip address of any node")
	}
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Join: join})
	if err != nil {
		return err
	}
	defer c.Close()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(*wait):
	}
	members := c.Members(ctx, 50*time.Millisecond)
	printStatus(stdout, members)
	printPartitions(stdout, c.Partitions())
	return nil
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
