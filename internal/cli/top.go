package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/internal/dashboard"
	"github.com/neptune-cluster/neptune/internal/gateway"
)

func newTopCmd() *cobra.Command {
	var (
		addr, service, node string
		partition, rows     int
		interval            time.Duration
		count               int
		sec                 securityFlags
	)
	cmd := &cobra.Command{
		Use:   "top --addr host:port [--interval 1s] [--count n]",
		Short: "Show the cluster live in the terminal: members, partitions, traffic, aggregations",
		Long: `Show what the web dashboard shows, at a glance in the terminal: the
members with their state, age, memory and load; each replicated partition
with its primary, epoch, lease and replicas' lag; the calls served by
the node; and, once any was made through it, its aggregation calls'
coverage, lost partitions and hedges; refreshed every --interval.

--addr is a node's (or gateway's) metrics address, the one its dashboard
is served on (https://host:port/cluster on a secured cluster, http://
otherwise). top reads the dashboard's JSON twins (/api/dashboard/...), so
it costs the node what one open page does. On a secured cluster give
--tls-dir: top presents the operator certificate there (--cert) over
HTTPS, as the dashboard admits operators only.
Each table is cut to --rows lines; narrow it with --service, --partition
and --node. --count stops after that many screens (0: until interrupted);
q quits (on a terminal at once, from a pipe a q in the input), as does
Ctrl-C.`,
		Example: "  neptune top --tls-dir pki --addr 127.0.0.1:9100\n  neptune top --insecure --addr 127.0.0.1:9100 --service forum --count 1",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if addr == "" {
				return Usagef("--addr is required (a node's metrics host:port)")
			}
			if interval < 100*time.Millisecond {
				return Usagef("--interval must be at least 100ms, got %v", interval)
			}
			q := url.Values{}
			if service != "" {
				q.Set("service", service)
			}
			if partition >= 0 {
				q.Set("partition", strconv.Itoa(partition))
			}
			if node != "" {
				q.Set("node", node)
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			restore := watchQuit(cmd.InOrStdin(), cancel)
			defer restore()
			hc, scheme, err := sec.httpClient()
			if err != nil {
				return err
			}
			return runTop(ctx, cmd.OutOrStdout(), hc, scheme+"://"+addr, q, interval, count, rows)
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&addr, "addr", "", "metrics `host:port` of a node or gateway (required)")
	fs.DurationVar(&interval, "interval", time.Second, "time between screens")
	fs.IntVar(&count, "count", 0, "screens to show, then exit (0: until interrupted)")
	fs.IntVar(&rows, "rows", 20, "lines per table at most (0: all)")
	fs.StringVar(&service, "service", "", "show only this service")
	fs.IntVar(&partition, "partition", -1, "show only this partition")
	fs.StringVar(&node, "node", "", "show only this node (and partitions it hosts)")
	sec.add(fs, "operator/operator", "your operator")
	return cmd
}

// runTop fetches the three views and redraws them until ctx ends or
// count screens were shown. On a terminal each screen replaces the last
// (ANSI clear); elsewhere screens follow each other.
func runTop(ctx context.Context, w io.Writer, hc *http.Client, base string, q url.Values, interval time.Duration, count, rows int) error {
	fetch := func(view string, v any) error {
		u := base + dashboard.APIPrefix + view
		if len(q) > 0 {
			u += "?" + q.Encode()
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return fmt.Errorf("top: %w", err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			return fmt.Errorf("top: %s: %s %s", u, resp.Status, bytes.TrimSpace(b))
		}
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			return fmt.Errorf("top: %s: not a dashboard answer: %w", u, err)
		}
		return nil
	}
	tty := isTerminal(w)
	for i := 0; count <= 0 || i < count; i++ {
		if i > 0 {
			if err := sleep(ctx, interval); err != nil {
				return nil // interrupted: a normal way to leave top
			}
		}
		var s dashboard.Screen
		for view, v := range map[string]any{"cluster": &s.Cluster, "partitions": &s.Partitions, "traffic": &s.Traffic, "aggregation": &s.Aggregation} {
			if err := fetch(view, v); err != nil {
				if ctx.Err() != nil {
					return nil // q or interrupted while fetching
				}
				return err
			}
		}
		var buf bytes.Buffer
		if tty {
			buf.WriteString("\x1b[H\x1b[2J")
		} else if i > 0 {
			buf.WriteString("\n")
		}
		if err := dashboard.WriteText(&buf, s, rows); err != nil {
			return err
		}
		if tty {
			buf.WriteString("\n(q quits)\n")
		}
		if _, err := w.Write(buf.Bytes()); err != nil {
			return err
		}
	}
	return nil
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// gatewayPollWait bounds each load poll of the gateway dashboard's
// Cluster view, as a node's does: a member that does not answer in time
// shows its load as late.
const gatewayPollWait = 20 * time.Millisecond

// mountGatewayDashboard serves the dashboard on a gateway's metrics
// listener: its client's yellow pages (live members, polled
// concurrently, and the recently departed ones with their replicas), its
// registry and its subscribers.
func mountGatewayDashboard(mux *http.ServeMux, g *gateway.Gateway, c *neptune.Client, reg prometheus.Gatherer, rss dashboard.PeerRSS) error {
	// g.Name() is "" for a gateway without demand gossip.
	d, err := dashboard.New(dashboard.Config{Self: g.Name(), Role: "gateway", Gatherer: reg, RSS: rss,
		Members: dashboard.MembersFunc(func(ctx context.Context) ([]neptune.Member, error) {
			return c.Members(ctx, 0), nil
		}),
		Loads: dashboard.LoadFunc(func(ctx context.Context, m neptune.Member) { c.PollLoad(ctx, m, gatewayPollWait) }),
		Departed: dashboard.DepartedFunc(func(context.Context) ([]neptune.DepartedMember, error) {
			return c.Departed(), nil
		}),
		Partitions: dashboard.PartitionsFunc(func(context.Context) ([]neptune.PartitionInfo, error) {
			return c.Partitions(), nil
		}),
		Subscribers: dashboard.SubscribersFunc(func(context.Context) (dashboard.Subscribers, error) {
			st := g.Status()
			out := dashboard.Subscribers{Gateway: st.Gateway, Gateways: st.Gateways, CapacityGRU: st.CapacityGRU}
			for _, s := range st.Subscribers {
				out.Subscribers = append(out.Subscribers, dashboard.Subscriber{Name: s.Name, Reserved: s.Reserved, Limit: s.Limit, Share: s.Share,
					DemandGRPS: s.DemandGRPS, Demanded: s.Demanded, Served: s.Served, Dropped: s.Dropped})
			}
			return out, nil
		}),
	})
	if err != nil {
		return err
	}
	d.Mount(mux)
	return nil
}
