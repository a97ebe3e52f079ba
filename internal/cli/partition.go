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
	// Lease is how long a majority's acknowledgement lets a primary serve
	// alone (default 400ms).
	Lease Duration `yaml:"lease"`
	// Linearizable makes reads and writes linearizable (levels 2 and 3):
	// reads go to the primary and run under its lease at a read index.
	Linearizable bool `yaml:"linearizable"`
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
		ElectionTimeout: time.Duration(r.ElectionTimeout), WriteWait: time.Duration(r.WriteWait), Lease: time.Duration(r.Lease),
		Linearizable: r.Linearizable}
	switch {
	case r.Level < 1 || r.Level > 3:
		return nil, fmt.Errorf("%s.level must be 1, 2 or 3, got %d", where, r.Level)
	case len(r.Nodes) == 0 && len(r.Replicas) == 0:
		return nil, fmt.Errorf("%s: set nodes and degree, or replicas", where)
	case len(r.Nodes) > 0 && (r.Degree < 1 || r.Degree > len(r.Nodes)):
		return nil, fmt.Errorf("%s.degree must be in 1..%d (the number of nodes), got %d", where, len(r.Nodes), r.Degree)
	case r.MinLive < 0:
		return nil, fmt.Errorf("%s.min_live must be >= 0, got %d", where, r.MinLive)
	case r.Linearizable && r.Level == 1:
		return nil, fmt.Errorf("%s.linearizable needs level 2 or 3 (level 1 has no primary to order reads)", where)
	}
	for key, d := range map[string]Duration{"staleness": r.Staleness, "heartbeat": r.Heartbeat, "ack_timeout": r.AckTimeout,
		"election_timeout": r.ElectionTimeout, "write_wait": r.WriteWait, "lease": r.Lease} {
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
// returns the partitions it registers: all of the service's. Those whose
// configured replica set names the node are hosted from the start; the
// others are on standby, hosted once a replica-set change (`neptune
// partition add|move`) names the node.
func replicatedService(fc FileConfig, s ServiceConfig) (svc neptune.Service, parts []int, err error) {
	r, err := s.Replication.toReplication("config: services." + s.Name)
	if err != nil {
		return svc, nil, err
	}
	parts = s.Partitions
	damaged := func(err error) error {
		return fmt.Errorf("%w (if the service's files are damaged, run `neptune partition rebuild --data-dir %s --service %s --service-state` and start the node again: its replicas of the service are rebuilt from their peers)",
			err, fc.DataDir, s.Name)
	}
	if mk, ok := durableBuiltins[s.Name]; ok {
		if svc, err = mk(filepath.Join(fc.DataDir, "service-"+s.Name)); err != nil {
			return svc, nil, damaged(err)
		}
	} else if svc, err = s.service(fc.DataDir); err != nil {
		return svc, nil, damaged(err)
	}
	svc.Replication = r
	return svc, parts, nil
}

// printPartitions prints replicated partitions: replicas, primary, epoch
// and each replica's version.
func printPartitions(w io.Writer, now time.Time, parts []neptune.PartitionInfo) {
	if len(parts) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nSERVICE\tPARTITION\tLEVEL\tPRIMARY\tEPOCH\tREPLICAS (node:role@version)")
	for _, p := range parts {
		primary, epoch := "-", uint64(0)
		leased, stale := false, ""
		var reps []string
		for _, r := range p.Replicas {
			if r.Role == "primary" && r.Epoch >= epoch {
				primary, epoch, leased, stale = r.Node, r.Epoch, r.Lease > 0, r.Stale
			}
			epoch = max(epoch, r.Epoch)
			reps = append(reps, replicaCell(now, r))
		}
		level := fmt.Sprint(p.Level)
		if p.Linearizable {
			level += " linearizable"
		}
		switch {
		case p.Level == 1:
			primary = "(none: level 1)"
		case primary != "-" && stale != "":
			primary += " (STALE: " + stale + ")"
		case primary != "-" && !leased:
			primary += " (no lease)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\n", p.Service, p.Partition, level, primary, epoch, strings.Join(reps, " "))
	}
	tw.Flush()
}

// replicaCell is one replica in `neptune status`: node:role@version, with
// "+lease" on a primary holding its majority lease (one without is not
// fresh and serves no level-3 or linearizable read), the role DIVERGED
// for a replica whose log differs from its primary's (it serves nothing),
// [stale] on a primary whose claim lapsed or was superseded (the primary
// column says which), and [lost-contact 1.3s] or [no-quorum 0.2s] on a
// replica that announced it lost touch with its primary or majority, and
// for how long by now.
func replicaCell(now time.Time, r neptune.ReplicaInfo) string {
	role, lease := r.Role, ""
	if r.Diverged {
		role = "DIVERGED"
	}
	switch {
	case r.Role == "primary" && r.Stale != "":
		lease = "[stale]"
	case r.Role == "primary" && r.Lease > 0:
		lease = "+lease"
	}
	if r.Contact != "" {
		lease += fmt.Sprintf("[%s %v]", r.Contact, now.Sub(r.LostSince).Round(100*time.Millisecond))
	}
	return fmt.Sprintf("%s:%s@%d%s", r.Node, role, r.Version, lease)
}

func newPartitionCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "partition",
		Short: "Operate on replicated partitions",
	}
	cmd.AddCommand(newPromoteCmd(), newMembersCmd("add"), newMembersCmd("remove"), newMembersCmd("move"), newMembersCmd("priority"), newApplyCmd(), newRebuildCmd())
	return cmd
}

// promoteOptions are the flags of `neptune partition promote`.
type promoteOptions struct {
	join          []string
	service, node string
	partition     int
	wait          time.Duration
	force         bool
	sec           securityFlags
	output        outputFlag
}

func newPromoteCmd() *cobra.Command {
	var o promoteOptions
	cmd := &cobra.Command{
		Use:   "promote --join host:port --service name --partition p [--node id] [--force]",
		Short: "Make a replica the primary of its partition",
		Long: `Make a replica the primary of its partition. Without --node, the replica
with the newest log is chosen.

By default the replica calls an election that needs the votes of a
majority of the partition's replicas, exactly as an automatic failover
would: no acknowledged write is lost. It may lose (a majority is
unreachable, or another primary still holds its lease): then nothing
changed and the command exits 1.

--force is the operator's way out when fewer than a majority survive: the
replica becomes primary at once, without votes. Acknowledged writes it
lacks are lost; the command first prints which versions may be: those
above the replica's last log entry up to the highest commit point any
replica announced. The other replicas recover from it; one whose log
differs below its commit point shows as DIVERGED in neptune status and
serves nothing until a snapshot of the new primary's service repairs it
(a service without snapshots: stop its node and run neptune partition
rebuild).

Only an operator certificate (--cert operator/NAME) may promote.`,
		Example: "  neptune partition promote --tls-dir pki --cert operator/alice --join 127.0.0.1:7946 --service kv --partition 0\n" +
			"  neptune partition promote --tls-dir pki --cert operator/alice --join 127.0.0.1:7946 --service kv --partition 0 --node c --force",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	joinFlag(fs, &o.join)
	fs.StringVar(&o.service, "service", "", "replicated service `name` (required)")
	fs.IntVar(&o.partition, "partition", 0, "partition `number` (required)")
	fs.StringVar(&o.node, "node", "", "`id` of the node whose replica becomes primary; default: the replica with the newest log")
	fs.BoolVar(&o.force, "force", false, "become primary without a majority's votes; acknowledged writes the replica lacks are lost")
	fs.DurationVar(&o.wait, "wait", time.Second, "how long to listen for announcements first")
	o.output.add(fs)
	o.sec.add(fs, "operator/operator", "your operator")
	for _, f := range []string{"join", "service", "partition"} {
		_ = cmd.MarkFlagRequired(f)
	}
	return cmd
}

func (o *promoteOptions) run(ctx context.Context, stdout, stderr io.Writer) error {
	if o.partition < 0 {
		return Usagef("--partition must be >= 0, got %d", o.partition)
	}
	c, err := o.sec.dialAndListen(ctx, o.join, o.wait)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := replicated(c, o.service); err != nil {
		return err
	}
	var reps []neptune.ReplicaInfo
	for _, p := range c.Partitions() {
		if p.Service == o.service && p.Partition == o.partition {
			reps = p.Replicas
		}
	}
	target := o.node
	if target == "" {
		if len(reps) == 0 {
			return fmt.Errorf("no live replica of %s partition %d in the yellow pages", o.service, o.partition)
		}
		target = slices.MaxFunc(reps, func(a, b neptune.ReplicaInfo) int {
			return cmp.Or(cmp.Compare(held(a), held(b)), cmp.Compare(a.Version, b.Version))
		}).Node
	}
	if !o.force {
		ri, err := c.Promote(ctx, target, o.service, o.partition)
		if err != nil {
			return err
		}
		if ri.Role != "primary" {
			return fmt.Errorf("%s partition %d: %s did not win a majority's votes: it is %s at epoch %d (primary known: %q). Nothing changed. "+
				"A majority of the replicas must be reachable and any primary's lease lapsed; with fewer than a majority alive, --force promotes it and may lose acknowledged writes",
				o.service, o.partition, ri.Node, ri.Role, ri.Epoch, ri.Primary)
		}
		if o.output.json() {
			return printJSON(stdout, promoteJSON(o.service, o.partition, false, ri))
		}
		fmt.Fprintf(stdout, "%s partition %d: %s is primary at epoch %d, version %d (elected by a majority)\n", o.service, o.partition, ri.Node, ri.Epoch, ri.Version)
		return nil
	}
	if o.output.json() {
		fmt.Fprintln(stderr, forceWarning(o.service, o.partition, target, reps))
	} else {
		fmt.Fprintln(stdout, forceWarning(o.service, o.partition, target, reps))
	}
	ri, err := c.ForcePromote(ctx, target, o.service, o.partition)
	if err != nil {
		return err
	}
	if o.output.json() {
		if err := printJSON(stdout, promoteJSON(o.service, o.partition, true, ri)); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "%s partition %d: %s is %s at epoch %d, version %d (forced)\n", o.service, o.partition, ri.Node, ri.Role, ri.Epoch, ri.Version)
	}
	if ri.Role != "primary" {
		return fmt.Errorf("%s partition %d: %s is %s after a forced promote (still recovering: retry once it has checked its log)", o.service, o.partition, ri.Node, ri.Role)
	}
	return nil
}

// held is the highest version a replica holds in its log.
func held(r neptune.ReplicaInfo) uint64 { return max(r.Last, r.Commit, r.Version) }

// forceWarning says which acknowledged versions a forced promote of
// target may lose: those above what target holds, up to the highest
// commit point any replica announced (a write is acknowledged only once
// committed). Writes acknowledged after the last announcements are not
// in the figure.
func forceWarning(service string, partition int, target string, reps []neptune.ReplicaInfo) string {
	var has, commit uint64
	var by string
	known := false
	for _, r := range reps {
		if r.Node == target {
			has, known = held(r), true
		}
		if r.Commit > commit {
			commit, by = r.Commit, r.Node
		}
	}
	head := fmt.Sprintf("WARNING: forcing %s to be the primary of %s partition %d without a majority's votes.", target, service, partition)
	switch {
	case !known:
		return head + fmt.Sprintf("\n%s is not in the yellow pages: what it holds is unknown; acknowledged versions up to %d (committed at %s) may be lost.", target, commit, by)
	case commit > has:
		return head + fmt.Sprintf("\nAcknowledged versions %d..%d may be LOST: %s holds up to %d; %s announced commit point %d.", has+1, commit, target, has, by, commit)
	}
	return head + fmt.Sprintf("\nNo acknowledged version is known to be lost: %s holds up to %d, the highest commit point announced is %d (writes acknowledged since the last announcements may still be).", target, has, commit)
}
