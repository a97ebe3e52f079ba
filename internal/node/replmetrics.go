package node

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neptune-cluster/neptune/internal/replica"
	"github.com/neptune-cluster/neptune/internal/replication"
)

// The replication metrics an operator alerts on (docs/alerts.yaml), one
// series per partition replica hosted here; lag is reported by the
// primary, per replica it feeds.
var replDescs = struct {
	role, hasPrimary, epoch, applied, committed, last, lease, staleness, diverged, contactLost *prometheus.Desc
	elections, stepDowns                                                                       *prometheus.Desc
	lagEntries, lagBytes, lagSeconds, inboxBytes                                               *prometheus.Desc
}{
	role: prometheus.NewDesc("neptune_replica_role",
		"1 for the role the replica here has now (primary, secondary or recovering), 0 for the others.",
		[]string{"service", "partition", "role"}, nil),
	hasPrimary: prometheus.NewDesc("neptune_partition_has_primary",
		"1 if the replica here knows a primary it is in touch with (a primary: one holding its lease, at levels 2 and 3), else 0; max over a partition's replicas is 0 when it has none.",
		partLabels, nil),
	epoch:     prometheus.NewDesc("neptune_replica_epoch", "The replica's epoch (term): it rises with each election.", partLabels, nil),
	applied:   prometheus.NewDesc("neptune_replica_applied_lsn", "Highest log sequence number the replica executed (its version).", partLabels, nil),
	committed: prometheus.NewDesc("neptune_replica_committed_lsn", "Highest log sequence number the replica knows committed.", partLabels, nil),
	last:      prometheus.NewDesc("neptune_replica_last_lsn", "The replica's last log entry, committed or not.", partLabels, nil),
	lease: prometheus.NewDesc("neptune_replica_lease_remaining_seconds",
		"A primary's majority lease left; 0 when it holds none (it then serves no linearizable or level-3 read), and on other replicas.", partLabels, nil),
	staleness: prometheus.NewDesc("neptune_replica_staleness_bound_seconds",
		"The partition's level-3 staleness bound x: a replica lagging longer serves stale reads (level-3 partitions only).", partLabels, nil),
	diverged: prometheus.NewDesc("neptune_replica_diverged",
		"1 while the replica's log differs from its primary's below its commit point (after a forced promote): it serves nothing until repaired.", partLabels, nil),
	contactLost: prometheus.NewDesc("neptune_replica_contact_lost_seconds",
		"How long the replica has not heard from its primary (a primary: from the majority its lease needs); 0 while in touch.", partLabels, nil),
	elections: prometheus.NewDesc("neptune_replica_elections_total",
		"Times the replica here became primary (won an election or took over).", partLabels, nil),
	stepDowns: prometheus.NewDesc("neptune_replica_step_downs_total",
		"Times the replica here stopped being primary (lease lapsed, higher epoch seen, handed over).", partLabels, nil),
	lagEntries: prometheus.NewDesc("neptune_replica_lag_entries",
		"Reported by the primary: log entries it holds that the replica has not acknowledged.", followerLabels, nil),
	lagBytes: prometheus.NewDesc("neptune_replica_lag_bytes",
		"Reported by the primary: entry bytes sent to the replica and not yet acknowledged.", followerLabels, nil),
	lagSeconds: prometheus.NewDesc("neptune_replica_lag_seconds",
		"Reported by the primary: age of the oldest append the replica has not acknowledged; 0 when it acknowledged all it was sent.", followerLabels, nil),
	inboxBytes: prometheus.NewDesc("neptune_replica_inbox_bytes",
		"Entry bytes the replica here received and has not yet taken into its log.", partLabels, nil),
}

var (
	partLabels     = []string{"service", "partition"}
	followerLabels = []string{"service", "partition", "replica", "learner"}
	replicaRoles   = []replica.Role{replica.Primary, replica.Secondary, replica.Recovering}
)

// replCollector exports the replication runtime's replicas at scrape time.
type replCollector struct{ repl *replication.Runtime }

func (replCollector) Describe(ch chan<- *prometheus.Desc) {
	d := &replDescs
	for _, desc := range []*prometheus.Desc{d.role, d.hasPrimary, d.epoch, d.applied, d.committed, d.last, d.lease, d.staleness,
		d.diverged, d.contactLost, d.elections, d.stepDowns, d.lagEntries, d.lagBytes, d.lagSeconds, d.inboxBytes} {
		ch <- desc
	}
}

func (c replCollector) Collect(ch chan<- prometheus.Metric) {
	d := &replDescs
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	for _, r := range c.repl.Replicas() {
		part := strconv.Itoa(int(r.Partition))
		gauge := func(desc *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, r.Service, part)
		}
		for _, role := range replicaRoles {
			ch <- prometheus.MustNewConstMetric(d.role, prometheus.GaugeValue, b(r.Role == role), r.Service, part, role.String())
		}
		gauge(d.hasPrimary, b(r.HasPrimary))
		gauge(d.epoch, float64(r.Epoch))
		gauge(d.applied, float64(r.Applied))
		gauge(d.committed, float64(r.Commit))
		gauge(d.last, float64(r.Last))
		gauge(d.lease, r.LeaseLeft.Seconds())
		if r.Staleness > 0 {
			gauge(d.staleness, r.Staleness.Seconds())
		}
		gauge(d.diverged, b(r.Diverged))
		gauge(d.contactLost, r.ContactLostSince.Seconds())
		gauge(d.inboxBytes, float64(r.InboxBytes))
		ch <- prometheus.MustNewConstMetric(d.elections, prometheus.CounterValue, float64(r.Elections), r.Service, part)
		ch <- prometheus.MustNewConstMetric(d.stepDowns, prometheus.CounterValue, float64(r.StepDowns), r.Service, part)
		for _, f := range r.Followers {
			labels := []string{r.Service, part, f.Replica, strconv.FormatBool(f.Learner)}
			ch <- prometheus.MustNewConstMetric(d.lagEntries, prometheus.GaugeValue, float64(f.Entries), labels...)
			ch <- prometheus.MustNewConstMetric(d.lagBytes, prometheus.GaugeValue, float64(f.Bytes), labels...)
			ch <- prometheus.MustNewConstMetric(d.lagSeconds, prometheus.GaugeValue, f.Age.Seconds(), labels...)
		}
	}
}
