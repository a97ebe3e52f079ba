package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/kv"
	"github.com/neptune-cluster/neptune/apps/listappend"
)

// ReplicationConfig is a service's `replication:` block. Every node hosting
// the service must have the same block (share one config file); each node
// hosts the listed partitions that have a replica on it.
type ReplicationConfig struct {
	// Level is the consistency level 1, 2 or 3.
	Level int `yaml:"level"`
	// Nodes and Degree place replicas with neptune.Place: partition p on
	// nodes[(p+i) mod len(nodes)], i < degree, priority degree-i.
	Nodes  []string `yaml:"nodes"`
	Degree int      `yaml:"degree"`
	// Replicas overrides the placement per partition.
	Replicas map[int][]ReplicaConfig `yaml:"replicas"`
	// Staleness is level 3's bound x (default 1s).
	Staleness       Duration `yaml:"staleness"`
	MinLive         int      `yaml:"min_live"`
	Heartbeat       Duration `yaml:"heartbeat"`
	AckTimeout      Duration `yaml:"ack_timeout"`
	ElectionTimeout Duration `yaml:"election_timeout"`
	WriteWait       Duration `yaml:"write_wait"`
}

// ReplicaConfig is one replica in `replication.replicas`.
type ReplicaConfig struct {
	Node     string `yaml:"node"`
	Priority int    `yaml:"priority"`
}

// toReplication converts the block, naming the YAML key of the first error.
func (r *ReplicationConfig) toReplication(where string) (*neptune.Replication, error) {
	where += ".replication"
	out := &neptune.Replication{Level: r.Level, Nodes: r.Nodes, Degree: r.Degree, MinLive: r.MinLive,
		Staleness: time.Duration(r.Staleness), Heartbeat: time.Duration(r.Heartbeat), AckTimeout: time.Duration(r.AckTimeout),
		ElectionTimeout: time.Duration(r.ElectionTimeout), WriteWait: time.Duration(r.WriteWait)}
	switch {
	case r.Level < 1 || r.Level > 3:
		return nil, fmt.Errorf("%s.level must be 1, 2 or 3, got %d", where, r.Level)
	case len(r.Nodes) == 0 && len(r.Replicas) == 0:
		return nil, fmt.Errorf("%s: set nodes and degree, or replicas", where)
	case len(r.Nodes) > 0 && (r.Degree < 1 || r.Degree > len(r.Nodes)):
		return nil, fmt.Errorf("%s.degree must be in 1..%d (the number of nodes), got %d", where, len(r.Nodes), r.Degree)
	case r.MinLive < 0:
		return nil, fmt.Errorf("%s.min_live must be >= 0, got %d", where, r.MinLive)
	}
	for key, d := range map[string]Duration{"staleness": r.Staleness, "heartbeat": r.Heartbeat, "ack_timeout": r.AckTimeout,
		"election_timeout": r.ElectionTimeout, "write_wait": r.WriteWait} {
		if d < 0 {
			return nil, fmt.Errorf("%s.%s must be >= 0, got %v", where, key, time.Duration(d))
		}
	}
	if len(r.Replicas) > 0 {
		out.Replicas = map[int][]neptune.ReplicaSpec{}
	}
	for p, rs := range r.Replicas {
		for i, s := range rs {
			if s.Node == "" {
				return nil, fmt.Errorf("%s.replicas.%d[%d].node is required", where, p, i)
			}
			out.Replicas[p] = append(out.Replicas[p], neptune.ReplicaSpec{Node: s.Node, Priority: s.Priority})
		}
	}
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return out, nil
}

// validateReplication checks services[i].replication and data_dir.
func (c FileConfig) validateReplication() error {
	for i, s := range c.Services {
		if s.Replication == nil {
			continue
		}
		where := fmt.Sprintf("config: services[%d]", i)
		r, err := s.Replication.toReplication(where)
		if err != nil {
			return err
		}
		if c.DataDir == "" {
			return fmt.Errorf("%s.replication needs data_dir (or --data-dir): where the write logs live", where)
		}
		for _, p := range s.Partitions {
			if len(r.ReplicasOf(p)) == 0 {
				return fmt.Errorf("%s.replication: partition %d has no replicas (add it to replicas, or set nodes and degree)", where, p)
			}
		}
	}
	return nil
}

// durableBuiltins build services that keep their data under a directory,
// used for replicated services so a restarted replica still has its state.
// Services missing here are built from builtins (in memory). Their stores
// sync every write, so they live as long as the process without a Close.
var durableBuiltins = map[string]func(dir string) (neptune.Service, error){
	"kv": func(dir string) (neptune.Service, error) {
		s, err := kv.Open(dir)
		if err != nil {
			return neptune.Service{}, err
		}
		return s.Service(), nil
	},
	listappend.Name: func(dir string) (neptune.Service, error) {
		s, err := listappend.Open(dir)
		if err != nil {
			return neptune.Service{}, err
		}
		return s.Service(), nil
	},
}

// replicatedService builds a replicated service for the node named id and
// returns the partitions it hosts (none: skip it).
func replicatedService(fc FileConfig, s ServiceConfig) (svc neptune.Service, parts []int, err error) {
	r, err := s.Replication.toReplication("config: services." + s.Name)
	if err != nil {
		return svc, nil, err
	}
	parts = r.PartitionsOn(fc.ID, s.Partitions)
	if len(parts) == 0 {
		return svc, nil, nil
	}
	if mk, ok := durableBuiltins[s.Name]; ok {
		if svc, err = mk(filepath.Join(fc.DataDir, "service-"+s.Name)); err != nil {
			return svc, nil, err
		}
	} else if svc, err = s.service(fc.DataDir); err != nil {
		return svc, nil, err
	}
	svc.Replication = r
	return svc, parts, nil
}

// printPartitions prints replicated partitions: replicas, primary, epoch
// and each replica's version.
func printPartitions(w io.Writer, parts []neptune.PartitionInfo) {
	if len(parts) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nSERVICE\tPARTITION\tLEVEL\tPRIMARY\tEPOCH\tREPLICAS (node:role@version)")
	for _, p := range parts {
		primary, epoch := "-", uint64(0)
		var reps []string
		for _, r := range p.Replicas {
			if r.Role == "primary" && r.Epoch >= epoch {
				primary, epoch = r.Node, r.Epoch
			}
			epoch = max(epoch, r.Epoch)
			reps = append(reps, fmt.Sprintf("%s:%s@%d", r.Node, r.Role, r.Version))
		}
		if p.Level == 1 {
			primary = "(none: level 1)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%s\n", p.Service, p.Partition, p.Level, primary, epoch, strings.Join(reps, " "))
	}
	tw.Flush()
}

func newPartitionCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "partition",
		Short: "Operate on replicated partitions",
	}
	cmd.AddCommand(newPromoteCmd())
	return cmd
}

// promoteOptions are the flags of `neptune partition promote`.
type promoteOptions struct {
	join          []string
	service, node string
	partition     int
	wait          time.Duration
	sec           securityFlags
}

func newPromoteCmd() *cobra.Command {
	var o promoteOptions
	cmd := &cobra.Command{
		Use:   "promote --join host:port --service name --partition p [--node id]",
		Short: "Make a replica the primary of its partition",
		Long: `Make a replica the primary of its partition: the operator's way out when
every replica was lost at once and none can prove it holds every
committed write. Without --node, the replica with the newest version is
promoted. Only an operator certificate (--cert operator/NAME) may promote.`,
		Example: "  neptune partition promote --tls-dir pki --cert operator/alice --join 127.0.0.1:7946 --service kv --partition 0",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringSliceVar(&o.join, "join", nil, "gossip `host:port` of any node; list (required)")
	fs.StringVar(&o.service, "service", "", "replicated service `name` (required)")
	fs.IntVar(&o.partition, "partition", 0, "partition `number` (required)")
	fs.StringVar(&o.node, "node", "", "`id` of the node whose replica becomes primary; default: the replica with the newest version")
	fs.DurationVar(&o.wait, "wait", time.Second, "how long to listen for announcements first")
	o.sec.add(fs, "operator/operator", "your operator")
	for _, f := range []string{"join", "service", "partition"} {
		_ = cmd.MarkFlagRequired(f)
	}
	return cmd
}

func (o *promoteOptions) run(ctx context.Context, stdout io.Writer) error {
	if o.partition < 0 {
		return Usagef("--partition must be >= 0, got %d", o.partition)
	}
	sec, err := o.sec.client()
	if err != nil {
		return err
	}
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Join: o.join, Security: sec})
	if err != nil {
		return err
	}
	defer c.Close()
	if err := sleep(ctx, o.wait); err != nil {
		return err
	}
	target := o.node
	if target == "" {
		for _, p := range c.Partitions() {
			if p.Service != o.service || p.Partition != o.partition || len(p.Replicas) == 0 {
				continue
			}
			best := slices.MaxFunc(p.Replicas, func(a, b neptune.ReplicaInfo) int { return cmp.Compare(a.Version, b.Version) })
			target = best.Node
		}
		if target == "" {
			return fmt.Errorf("no live replica of %s partition %d in the yellow pages", o.service, o.partition)
		}
	}
	ri, err := c.Promote(ctx, target, o.service, o.partition)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s partition %d: %s is %s at epoch %d, version %d\n", o.service, o.partition, ri.Node, ri.Role, ri.Epoch, ri.Version)
	return nil
}
