package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/internal/gateway"
)

func newStatusCmd() *cobra.Command {
	var (
		join     []string
		gateways []string
		wait     time.Duration
		sf       securityFlags
		output   outputFlag
	)
	cmd := &cobra.Command{
		Use:   "status --join host:port [--wait 1s] [--gateway host:port]",
		Short: "Print the yellow pages: nodes, services, partitions, load",
		Long: `Print the yellow pages as a client sees them: every node with its
services, partitions and polled load, then each replicated partition with
its primary, epoch and replica versions (a service without replication has
none).

With --gateway (the metrics address of an HTTP gateway, repeatable), also
print each subscriber as the gateways see it: its reservation, each
gateway's share of it and the demand there, and the requests demanded,
served and dropped, per gateway and in total.

-o json prints one JSON document instead: members, partitions (each with
its primary and replicas: role, epoch, version, commit, lease) and, with
--gateway, each gateway's subscribers.`,
		Example: "  neptune status --tls-dir pki --join 127.0.0.1:7946\n  neptune status --gateway 127.0.0.1:9101 --gateway 127.0.0.1:9102",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if len(join) == 0 && len(gateways) == 0 {
				return Usagef("one of --join or --gateway is required")
			}
			var doc statusJSON
			if len(gateways) > 0 {
				// A secured gateway's status is HTTPS and admits operators.
				hc, scheme, err := sf.httpClient()
				if err != nil {
					return err
				}
				gws, err := fetchGateways(ctx, hc, scheme, gateways)
				if err != nil {
					return err
				}
				if doc.Gateways = gws; !output.json() {
					if err := printGateways(cmd.OutOrStdout(), gws); err != nil {
						return err
					}
				}
				if len(join) == 0 {
					if output.json() {
						doc.Members, doc.Partitions = []memberJSON{}, []partitionJSON{}
						return printJSON(cmd.OutOrStdout(), doc)
					}
					return nil
				}
			}
			sec, err := sf.clientFiles()
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
			members := c.Members(ctx, 50*time.Millisecond)
			parts := c.Partitions()
			if output.json() {
				doc.Members, doc.Partitions = membersJSON(members), partitionsJSON(parts)
				return printJSON(stdout, doc)
			}
			printStatus(stdout, members)
			if len(parts) == 0 {
				fmt.Fprintln(stdout, "\nNo replicated partition announced: a service without replication (services[i].replication in the node config) has no primary, epoch or versions.")
			}
			printPartitions(stdout, time.Now(), parts)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringSliceVar(&join, "join", nil, "gossip `host:port` of any node; list (this or --gateway is required)")
	fs.DurationVar(&wait, "wait", time.Second, "how long to listen for announcements before printing")
	fs.StringSliceVar(&gateways, "gateway", nil, "metrics `host:port` of an HTTP gateway, for its subscribers; repeatable")
	output.add(fs)
	sf.add(fs, "client/client", "your client")
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

// fetchGateways fetches each gateway's /api/subscribers (HTTPS on a
// secured cluster, where it admits operators).
func fetchGateways(ctx context.Context, hc *http.Client, scheme string, addrs []string) ([]gatewayJSON, error) {
	var out []gatewayJSON
	for _, a := range addrs {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+a+gateway.StatusPath, nil)
		if err != nil {
			return nil, fmt.Errorf("gateway %s: %w", a, err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, fmt.Errorf("gateway %s: %w", a, err)
		}
		var st gateway.Status
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			hint := ""
			if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
				hint = "; a secured gateway's status admits operators: --cert operator/NAME"
			}
			return nil, fmt.Errorf("gateway %s: %s: not a gateway status (%s, %v)%s", a, gateway.StatusPath, resp.Status, err, hint)
		}
		out = append(out, gatewayJSON{Gateway: a, Subscribers: append([]gateway.SubscriberStatus{}, st.Subscribers...)})
	}
	return out, nil
}

// printGateways prints the subscribers per gateway, then summed over the
// gateways.
func printGateways(w io.Writer, gws []gatewayJSON) error {
	type row struct {
		gw string
		s  gateway.SubscriberStatus
	}
	var rows []row
	total := map[string]*gateway.SubscriberStatus{}
	var order []string
	for _, g := range gws {
		for _, s := range g.Subscribers {
			rows = append(rows, row{g.Gateway, s})
			t := total[s.Name]
			if t == nil {
				t = &gateway.SubscriberStatus{Name: s.Name, Reserved: s.Reserved, Limit: s.Limit}
				total[s.Name] = t
				order = append(order, s.Name)
			}
			t.Share += s.Share
			t.DemandGRPS += s.DemandGRPS
			t.Demanded += s.Demanded
			t.Served += s.Served
			t.Dropped += s.Dropped
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GATEWAY\tSUBSCRIBER\tRESERVED\tSHARE\tDEMAND/S\tDEMANDED\tSERVED\tDROPPED")
	line := func(gw string, s gateway.SubscriberStatus) {
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.2f\t%.1f\t%d\t%d\t%d\n", gw, s.Name, s.Reserved, s.Share, s.DemandGRPS, s.Demanded, s.Served, s.Dropped)
	}
	for _, r := range rows {
		line(r.gw, r.s)
	}
	if len(gws) > 1 {
		for _, name := range order {
			line("total", *total[name])
		}
	}
	return tw.Flush()
}
