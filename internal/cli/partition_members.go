package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	neptune "github.com/neptune-cluster/neptune"
)

// membersOptions are the flags of `neptune partition
// add|remove|move|priority`.
type membersOptions struct {
	join     []string
	priority int
	wait     time.Duration
	timeout  time.Duration
	sec      securityFlags
	output   outputFlag
}

// changeRetry is the pause before asking again when the announced primary
// was not (or no longer) the primary.
const changeRetry = 200 * time.Millisecond

func newMembersCmd(verb string) *cobra.Command {
	var o membersOptions
	use, short, long, args := "", "", "", cobra.ExactArgs(3)
	switch verb {
	case "add":
		use, short = "add SERVICE PARTITION NODE", "Add a replica of a partition on NODE, while it serves"
		long = `Add a replica of a replicated partition on NODE while the partition serves.
NODE must run and host the service (a node hosts every partition of a
service its config names, on standby until a replica is added there).

The new replica joins as a learner: it receives the primary's log (or a
snapshot of the service, then the log), counts for no majority and serves
nothing. The primary promotes it to voter once it holds the log up to the
commit point; from then on it counts for the majority and serves. The
command waits for that.`
	case "remove":
		use, short = "remove SERVICE PARTITION NODE", "Remove NODE's replica of a partition, while it serves"
		long = `Remove NODE's replica of a replicated partition while the partition serves.
Removing the primary hands its role to another replica first. The removed
replica is no longer announced or served; its data directory is kept.
A removal that would leave fewer live replicas than a majority of the
remaining ones is refused.`
	case "move":
		use, short, args = "move SERVICE PARTITION FROM TO", "Move a partition's replica from one node to another, while it serves", cobra.ExactArgs(4)
		long = `Move a replicated partition's replica from node FROM to node TO while the
partition serves: add TO (with FROM's priority unless --priority is set),
wait until it caught up and votes, then remove FROM.`
	case "priority":
		use, short, args = "priority SERVICE PARTITION NODE PRIORITY", "Change the priority of NODE's replica of a partition", cobra.ExactArgs(4)
		long = `Change the priority of NODE's replica of a replicated partition. The
highest-priority live replica that holds the log is the preferred primary:
the primary hands its role to it, so raising a replica above every other
moves the primary role for good (neptune partition promote moves it only
until priorities hand it back). The command waits for the change to
commit, not for the hand-over.`
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: long + `

Each step is a configuration entry in the partition's replicated log,
committed by a majority, one at a time. The command talks to the
partition's primary (found in the yellow pages) and prints the replica
set after each step. On an error it says whether the change may have
happened; asking again is safe. Only an operator certificate (--cert
operator/NAME) may change replica sets (besides nodes: automatic
placement, the node config's placement section, makes the same changes).

On a terminal, a step that adds a replica shows how far the new replica
has caught up (its version against the primary's) while it waits; -o json
prints each step's replica set as one JSON object per line.`,
		Example: fmt.Sprintf("  neptune partition %s --tls-dir pki --cert operator/alice --join 127.0.0.1:7946 kv 0 %s", verb,
			map[string]string{"add": "d", "remove": "c", "move": "c d", "priority": "b 10"}[verb]),
		Args: args,
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), verb, args, cmd.Flags().Changed("priority"))
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	joinFlag(fs, &o.join)
	if verb == "add" || verb == "move" {
		fs.IntVar(&o.priority, "priority", 1, "the new replica's `priority` (the highest-priority replica is the preferred primary)")
	}
	fs.DurationVar(&o.wait, "wait", time.Second, "how long to listen for announcements first")
	fs.DurationVar(&o.timeout, "timeout", time.Minute, "how long to wait for each step to commit")
	o.output.add(fs)
	o.sec.add(fs, "operator/operator", "your operator")
	_ = cmd.MarkFlagRequired("join")
	return cmd
}

func (o *membersOptions) run(ctx context.Context, stdout, stderr io.Writer, verb string, args []string, prioritySet bool) error {
	service := args[0]
	partition, err := strconv.Atoi(args[1])
	if err != nil || partition < 0 {
		return Usagef("PARTITION must be a number >= 0, got %q", args[1])
	}
	c, err := o.sec.dialAndListen(ctx, o.join, o.wait)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := replicated(c, service); err != nil {
		return err
	}
	p := &partitionRef{c: c, service: service, partition: partition, timeout: o.timeout, out: stdout, json: o.output.json(), prog: newProgress(stderr)}
	switch verb {
	case "add":
		_, err = p.change(ctx, args[2], o.priority, "")
		return err
	case "remove":
		_, err = p.change(ctx, "", 0, args[2])
		return err
	case "priority":
		prio, err := strconv.Atoi(args[3])
		if err != nil {
			return Usagef("PRIORITY must be a number, got %q", args[3])
		}
		_, err = p.setPriority(ctx, args[2], prio)
		return err
	}
	from, to := args[2], args[3]
	prio := o.priority
	if !prioritySet {
		rs, err := p.readSet(ctx, from)
		if err != nil {
			return fmt.Errorf("reading the replica set (nothing changed): %w", err)
		}
		found := false
		for _, m := range rs.Members {
			if m.Node == from {
				prio, found = m.Priority, true
			}
		}
		if !found {
			return fmt.Errorf("%s partition %d has no replica on %s (replica set %s); nothing changed", service, partition, from, setString(rs))
		}
	}
	if _, err := p.change(ctx, to, prio, ""); err != nil {
		return fmt.Errorf("%w (%s was not removed)", err, from)
	}
	if _, err := p.change(ctx, "", 0, from); err != nil {
		return fmt.Errorf("%w (%s was added)", err, to)
	}
	return nil
}

// applyOptions are the flags of `neptune partition apply`.
type applyOptions struct {
	membersOptions
	config  string
	service string
	dryRun  bool
}

func newApplyCmd() *cobra.Command {
	var o applyOptions
	cmd := &cobra.Command{
		Use:   "apply --join host:port --config node.yaml [--service name] [--dry-run]",
		Short: "Change replica sets to what a config file declares, while they serve",
		Long: `Change the replica sets of replicated partitions to what a node config file
declares (replication.replicas, or nodes and degree): for each partition of
each replicated service in the file (or only --service), the replicas the
file names that the partition lacks are added (with the file's priority),
then the ones it has that the file does not name are removed, one
committed step at a time, exactly as neptune partition add and remove do.
Priorities of replicas that stay are not changed. --dry-run prints the
steps without making them.

A config file only seeds a new partition's replica set: once changed, a
partition's set is what its log says, so editing the file changes nothing
until this command (or add, remove, move) runs.`,
		Example: "  neptune partition apply --tls-dir pki --cert operator/alice --join 127.0.0.1:7946 --config cluster.yaml --service kv",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	joinFlag(fs, &o.join)
	fs.StringVar(&o.config, "config", "", "node config `file` declaring the replica sets (required)")
	fs.StringVar(&o.service, "service", "", "only this replicated service (default: every one in the file)")
	fs.BoolVar(&o.dryRun, "dry-run", false, "print the steps, make none")
	fs.DurationVar(&o.wait, "wait", time.Second, "how long to listen for announcements first")
	fs.DurationVar(&o.timeout, "timeout", time.Minute, "how long to wait for each step to commit")
	o.output.add(fs)
	o.sec.add(fs, "operator/operator", "your operator")
	_ = cmd.MarkFlagRequired("join")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}

func (o *applyOptions) run(ctx context.Context, stdout, stderr io.Writer) error {
	fc, err := readConfig(o.config)
	if err != nil {
		return err
	}
	c, err := o.sec.dialAndListen(ctx, o.join, o.wait)
	if err != nil {
		return err
	}
	defer c.Close()
	found := false
	for _, s := range fc.Services {
		if s.Replication == nil || (o.service != "" && s.Name != o.service) {
			continue
		}
		found = true
		r, err := s.Replication.toReplication("config: services." + s.Name)
		if err != nil {
			return err
		}
		for _, part := range s.Partitions {
			p := &partitionRef{c: c, service: s.Name, partition: part, timeout: o.timeout, out: stdout, json: o.output.json(), prog: newProgress(stderr)}
			primary := announcedPrimary(c, s.Name, part)
			if primary == "" {
				return fmt.Errorf("%s partition %d: no primary announced (nothing changed here)", s.Name, part)
			}
			cur, err := p.readSet(ctx, primary)
			if err != nil {
				return fmt.Errorf("%s partition %d: reading the replica set (nothing changed here): %w", s.Name, part, err)
			}
			has := map[string]bool{}
			for _, m := range cur.Members {
				has[m.Node] = true
			}
			want := map[string]bool{}
			var steps [][3]string // add/remove, node, priority
			for _, spec := range r.ReplicasOf(part) {
				want[spec.Node] = true
				if !has[spec.Node] {
					steps = append(steps, [3]string{"add", spec.Node, strconv.Itoa(spec.Priority)})
				}
			}
			for _, m := range cur.Members {
				if !want[m.Node] {
					steps = append(steps, [3]string{"remove", m.Node, ""})
				}
			}
			if len(steps) == 0 {
				fmt.Fprintf(stdout, "%s partition %d: replica set %s as declared\n", s.Name, part, setString(cur))
				continue
			}
			for _, st := range steps {
				if o.dryRun {
					fmt.Fprintf(stdout, "%s partition %d: would %s %s\n", s.Name, part, st[0], st[1])
					continue
				}
				if st[0] == "add" {
					prio, _ := strconv.Atoi(st[2])
					_, err = p.change(ctx, st[1], prio, "")
				} else {
					_, err = p.change(ctx, "", 0, st[1])
				}
				if err != nil {
					return err
				}
			}
		}
	}
	if !found {
		return fmt.Errorf("%s declares no replicated service%s", o.config, map[bool]string{true: " named " + o.service}[o.service != ""])
	}
	return nil
}

// partitionRef is the partition a command changes.
type partitionRef struct {
	c         *neptune.Client
	service   string
	partition int
	timeout   time.Duration
	out       io.Writer
	// json prints each step as a JSON object; prog shows a step's
	// progress on a terminal.
	json bool
	prog *progress
	// watch is the replica a step adds (its catch-up is shown).
	watch string
}

// change makes one change, waits for it to commit and prints the result.
func (p *partitionRef) change(ctx context.Context, add string, priority int, remove string) (neptune.ReplicaSet, error) {
	what := "add " + add
	if remove != "" {
		what = "remove " + remove
	}
	p.watch = add
	defer func() { p.watch = "" }()
	return p.step(ctx, what, func(ctx context.Context, primary string) (neptune.ReplicaSet, error) {
		return p.c.ChangeReplicas(ctx, primary, p.service, p.partition, add, priority, remove)
	})
}

// setPriority changes replica's priority, waits for it to commit and
// prints the result.
func (p *partitionRef) setPriority(ctx context.Context, replica string, priority int) (neptune.ReplicaSet, error) {
	return p.step(ctx, fmt.Sprintf("priority of %s to %d", replica, priority), func(ctx context.Context, primary string) (neptune.ReplicaSet, error) {
		return p.c.SetReplicaPriority(ctx, primary, p.service, p.partition, replica, priority)
	})
}

// step makes one change by call at the partition's primary (ask), waits
// for it to commit and prints the result.
func (p *partitionRef) step(ctx context.Context, what string, call changeCall) (neptune.ReplicaSet, error) {
	start := time.Now()
	stop := p.showCatchUp(what)
	rs, err := p.ask(ctx, call)
	stop()
	if err != nil {
		return rs, fmt.Errorf("%s partition %d: %s: %w", p.service, p.partition, what, err)
	}
	if !rs.Done {
		return rs, fmt.Errorf("%s partition %d: %s: not committed within %v (replica set %s); it may still complete: check neptune status, or ask again",
			p.service, p.partition, what, p.timeout, setString(rs))
	}
	if p.json {
		return rs, printJSON(p.out, setJSON(p.service, p.partition, what, time.Since(start), rs))
	}
	fmt.Fprintf(p.out, "%s partition %d: %s: done in %v; replica set %s, primary %s\n", p.service, p.partition, what,
		time.Since(start).Round(time.Millisecond), setString(rs), rs.Primary)
	return rs, nil
}

// showCatchUp shows, on a terminal, how far the replica being added
// (watch) has caught up with the primary, from the yellow pages, until
// the returned func is called.
func (p *partitionRef) showCatchUp(what string) (stop func()) {
	if p.prog == nil || !p.prog.on || p.watch == "" {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				p.prog.done()
				return
			case <-t.C:
			}
			var have, want uint64
			for _, pi := range p.c.Partitions() {
				if pi.Service != p.service || pi.Partition != p.partition {
					continue
				}
				for _, r := range pi.Replicas {
					if r.Node == p.watch {
						have = r.Version
					}
					if r.Role == "primary" && r.Stale == "" {
						want = r.Commit
					}
				}
			}
			p.prog.show("%s partition %d: %s: %s has %d of %d entries (%d to catch up)", p.service, p.partition, what, p.watch, have, want, want-min(have, want))
		}
	}()
	return func() { close(done); <-finished }
}

// ask sends the change to the partition's announced primary, following
// it while announcements lag (a primary that is not one any more changed
// nothing). Errors say whether the change may have happened.
func (p *partitionRef) ask(ctx context.Context, call changeCall) (neptune.ReplicaSet, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	for {
		primary := announcedPrimary(p.c, p.service, p.partition)
		if primary != "" {
			rs, err := call(ctx, primary)
			switch {
			case err == nil:
				return rs, nil
			case strings.Contains(err.Error(), "change refused"):
				return rs, fmt.Errorf("%w (nothing changed)", err)
			case !errors.Is(err, neptune.ErrNoPrimary) && !errors.Is(err, neptune.ErrNoReplica):
				return rs, fmt.Errorf("%w (the change may have happened: check neptune status, or ask again)", err)
			}
		}
		select {
		case <-ctx.Done():
			return neptune.ReplicaSet{}, fmt.Errorf("no primary answered within %v (nothing changed)", p.timeout)
		case <-time.After(changeRetry):
		}
	}
}

// changeCall makes one change at primary.
type changeCall func(ctx context.Context, primary string) (neptune.ReplicaSet, error)

// readSet asks primary for the replica set: adding a member changes
// nothing and answers the set.
func (p *partitionRef) readSet(ctx context.Context, member string) (neptune.ReplicaSet, error) {
	return p.ask(ctx, func(ctx context.Context, primary string) (neptune.ReplicaSet, error) {
		return p.c.ChangeReplicas(ctx, primary, p.service, p.partition, member, 0, "")
	})
}

// replicated checks the yellow pages for a replicated service: an
// unhosted or unreplicated one has no replica set to change, and asking
// its primary would only wait for the timeout.
func replicated(c *neptune.Client, service string) error {
	for _, p := range c.Partitions() {
		if p.Service == service {
			return nil
		}
	}
	for _, m := range c.Members(context.Background(), 0) {
		for _, s := range m.Services {
			if s.Name == service {
				return fmt.Errorf("service %s is not replicated: it has no replica sets to change and no primary (nothing changed); replicate it with a replication: block in its services entry of the node config (see examples/node.yaml)", service)
			}
		}
	}
	return fmt.Errorf("no node in the yellow pages hosts service %s (nothing changed); check the name, and --join", service)
}

// announcedPrimary is the replica the yellow pages announce as the
// partition's primary in the highest epoch ("" if none).
func announcedPrimary(c *neptune.Client, service string, partition int) string {
	best, epoch := "", uint64(0)
	for _, p := range c.Partitions() {
		if p.Service != service || p.Partition != partition {
			continue
		}
		for _, r := range p.Replicas {
			if r.Role == "primary" && r.Epoch >= epoch {
				best, epoch = r.Node, r.Epoch
			}
		}
	}
	return best
}

// setString prints a replica set as node(priority[,learner]) ...
func setString(rs neptune.ReplicaSet) string {
	var b strings.Builder
	for i, m := range rs.Members {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s(%d", m.Node, m.Priority)
		if m.Learner {
			b.WriteString(",learner")
		}
		b.WriteByte(')')
	}
	return b.String()
}
