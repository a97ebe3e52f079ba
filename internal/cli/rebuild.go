package cli

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/neptune-cluster/neptune/internal/replication"
)

// rebuildOptions are the flags of `neptune partition rebuild`.
type rebuildOptions struct {
	dataDir, service string
	partition        int
	state            bool
}

func newRebuildCmd() *cobra.Command {
	var o rebuildOptions
	cmd := &cobra.Command{
		Use:   "rebuild --data-dir DIR --service name (--partition p | --service-state)",
		Short: "Quarantine a stopped node's replica of a partition, to rebuild it from its peers",
		Long: `Quarantine a replica whose write log is corrupt, so that it is rebuilt
from its peers. Run it on the node's machine while the node is stopped
(a node that finds a corrupt write log at start refuses to start and
names this command). It moves DIR/SERVICE/PARTITION to
DIR/.quarantine/SERVICE/PARTITION-TIME; nothing is deleted. When the node
starts again the replica starts empty and catches up from the primary:
by a snapshot of the service, or by the log if the primary still holds
all of it (the service then runs again writes its state may already
reflect, which it must tolerate: listappend skips the LSNs it recorded,
kv's puts set the same values again).

A node with storage.rebuild_corrupt: true in its config does this by
itself, at start, for every replica it finds corrupt.

--service-state is for a damaged store of the service itself (the
durable kv and listappend stores, forum's and auction's SQLite files under
DIR/service-SERVICE; a node that cannot open one refuses to start and
names this flag): it moves the service's store and the write logs of all
of its partitions on this node to DIR/.quarantine/SERVICE/TIME, since a
write log kept over a fresh store would skip the writes it records as
done. Every replica of the service on this node is then rebuilt from its
peers.`,
		Example: "  neptune partition rebuild --data-dir /var/lib/neptune --service kv --partition 3\n" +
			"  neptune partition rebuild --data-dir /var/lib/neptune --service listappend --service-state",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&o.dataDir, "data-dir", "", "the stopped node's data `directory` (required)")
	fs.StringVar(&o.service, "service", "", "replicated service `name` (required)")
	fs.IntVar(&o.partition, "partition", -1, "partition `number` whose write log to quarantine")
	fs.BoolVar(&o.state, "service-state", false, "quarantine the service's own store and all its partitions' write logs")
	for _, f := range []string{"data-dir", "service"} {
		_ = cmd.MarkFlagRequired(f)
	}
	cmd.MarkFlagsMutuallyExclusive("partition", "service-state")
	cmd.MarkFlagsOneRequired("partition", "service-state")
	return cmd
}

func (o *rebuildOptions) run(w io.Writer) error {
	if o.state {
		to, err := replication.QuarantineService(o.dataDir, o.service, time.Now())
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "quarantined service %s's state and write logs: moved to %s\nstart the node: its replicas are rebuilt from their peers\n", o.service, to)
		return nil
	}
	if o.partition < 0 {
		return fmt.Errorf("--partition must be >= 0, got %d", o.partition)
	}
	to, err := replication.Quarantine(o.dataDir, o.service, int32(o.partition), time.Now())
	if errors.Is(err, replication.ErrInUse) {
		return fmt.Errorf("%w (nothing moved)", err)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "quarantined %s partition %d: moved to %s\nstart the node: the replica is rebuilt from its peers\n", o.service, o.partition, to)
	return nil
}
