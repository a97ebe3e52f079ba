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
}

func newRebuildCmd() *cobra.Command {
	var o rebuildOptions
	cmd := &cobra.Command{
		Use:   "rebuild --data-dir DIR --service name --partition p",
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
itself, at start, for every replica it finds corrupt.`,
		Example: "  neptune partition rebuild --data-dir /var/lib/neptune --service kv --partition 3",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&o.dataDir, "data-dir", "", "the stopped node's data `directory` (required)")
	fs.StringVar(&o.service, "service", "", "replicated service `name` (required)")
	fs.IntVar(&o.partition, "partition", 0, "partition `number` (required)")
	for _, f := range []string{"data-dir", "service", "partition"} {
		_ = cmd.MarkFlagRequired(f)
	}
	return cmd
}

func (o *rebuildOptions) run(w io.Writer) error {
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
