package node

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/neptune-cluster/neptune/internal/dashboard"
	"github.com/neptune-cluster/neptune/internal/metrics"
	"github.com/neptune-cluster/neptune/internal/replication"
	"github.com/neptune-cluster/neptune/internal/security"
)

// serverMetrics are a node's serving-side metrics.
type serverMetrics struct {
	calls   *prometheus.CounterVec
	latency *prometheus.HistogramVec
	wait    *prometheus.HistogramVec
}

func newServerMetrics(reg prometheus.Registerer) (*serverMetrics, error) {
	m := &serverMetrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "neptune_server_calls_total",
			Help: "Calls served by this node, by service, method and outcome.",
		}, []string{"service", "method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "neptune_server_call_seconds",
			Help:    "Time from arrival to answer of calls served by this node.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18),
		}, []string{"service", "method"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "neptune_server_queue_wait_seconds",
			Help:    "Time requests spent queued before a worker took them.",
			Buckets: prometheus.ExponentialBuckets(10e-6, 2, 20),
		}, []string{"service", "class"}),
	}
	return m, metrics.Register(reg,
		metrics.Metric{Name: "neptune_server_calls_total", Collector: m.calls},
		metrics.Metric{Name: "neptune_server_call_seconds", Collector: m.latency},
		metrics.Metric{Name: "neptune_server_queue_wait_seconds", Collector: m.wait})
}

func (m *serverMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.calls, m.latency, m.wait}
}

// registerStartMetrics registers what exists once services are fixed:
// each service's queue length and the class schedulers' statistics.
func (n *Node) registerStartMetrics() error {
	var ms []metrics.Metric
	for name, h := range n.services {
		ms = append(ms, metrics.Metric{Name: fmt.Sprintf("neptune_queue_length{service=%q}", name), Collector: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "neptune_queue_length",
			Help:        "Load index of a hosted service: active plus queued requests.",
			ConstLabels: prometheus.Labels{"service": name},
		}, func() float64 { return float64(h.pool.Load()) })})
	}
	ms = append(ms, metrics.Metric{Name: "neptune_class_*", Collector: &classCollector{n: n}},
		metrics.Metric{Name: "neptune_inflight_bytes", Collector: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "neptune_inflight_bytes",
			Help: "Request (and response) bytes of the calls this node holds now, against its budget (NodeConfig.MaxInflightBytes).",
		}, func() float64 { return float64(n.inflight.Used()) })},
		metrics.Metric{Name: "neptune_inflight_refused_total", Collector: prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "neptune_inflight_refused_total",
			Help: "Calls refused with ErrOverloaded because the node's in-flight byte budget was full; they never ran.",
		}, func() float64 { return float64(n.inflight.Refused()) })})
	if repl := n.repl; repl != nil {
		ms = append(ms, metrics.Metric{Name: "neptune_replication_resent_bytes_total", Collector: prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "neptune_replication_resent_bytes_total",
			Help: "Bytes of replicated writes sent again to a replica that had been sent them: retransmissions after a loss or a reject.",
		}, func() float64 { _, b := repl.Resent(); return float64(b) })},
			metrics.Metric{Name: "neptune_replication_held_bytes", Collector: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "neptune_replication_held_bytes",
				Help: "Bytes of replication messages this node holds: queued or in flight to other nodes, and received entries its partitions have not taken yet. The in-flight budget counts them.",
			}, func() float64 { return float64(repl.HeldBytes()) })})
	}
	if repl := n.repl; repl != nil {
		ms = append(ms, metrics.Metric{Name: "neptune_storage_*", Collector: storageCollector{repl}},
			metrics.Metric{Name: "neptune_replica_*", Collector: replCollector{repl}})
	}
	ms = append(ms, metrics.Metric{Name: "neptune_tls_certificate_expiry_timestamp_seconds", Collector: n.sec.CertCollector()})
	if err := metrics.Register(n.reg.Registerer, ms...); err != nil {
		return err
	}
	for _, m := range ms {
		n.registered = append(n.registered, m.Collector)
	}
	return nil
}

// unregisterMetrics takes every metric of the node out of its registry,
// so a node restarted in the same process can register again.
func (n *Node) unregisterMetrics() {
	for _, c := range append(n.registered, n.metrics.collectors()...) {
		n.reg.Registerer.Unregister(c)
	}
}

// serveMetrics serves /metrics (the registry, or its private twin) and,
// with Pprof, /debug/pprof/ on MetricsAddr. The Go and process collectors
// and neptune_build_info are registered unless the registry has them
// already (the default registerer has the first two; nodes sharing a
// registry share the last).
func (n *Node) serveMetrics() error {
	for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), metrics.BuildInfo()} {
		registered, err := metrics.RegisterShared(n.reg.Registerer, c)
		if err != nil {
			return fmt.Errorf("neptune: register the Go, process and build-info collectors: %w", err)
		}
		if registered {
			n.registered = append(n.registered, c)
		}
	}
	ln, err := net.Listen("tcp", n.cfg.MetricsAddr)
	if err != nil {
		return fmt.Errorf("neptune: listen for metrics (MetricsAddr %q): %w", n.cfg.MetricsAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(n.reg.Gatherer, promhttp.HandlerOpts{Registry: n.reg.Registerer}))
	dash, err := n.dashboard()
	if err != nil {
		ln.Close()
		return err
	}
	dash.Mount(mux)
	n.mountHealth(mux)
	if n.cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	n.httpLn = ln
	n.httpSrv = &http.Server{Handler: n.sec.HTTPGuard(mux, security.MemberAccess(dashboard.APIPrefix+"self")), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = n.httpSrv.Serve(n.sec.HTTPListener(ln)) }()
	return nil
}

// classDescs are the per-class metrics of services with Classes, read from
// the node schedulers' Stats at scrape time.
var classDescs = struct {
	arrivals, dispatched, completions, abandoned, drops, offered, realized, wait *prometheus.Desc
	loss, share, windowShare, guarantee, queued, inFlight, mode                  *prometheus.Desc
}{
	arrivals:    classDesc("neptune_class_arrivals_total", "Requests of the class that reached the node scheduler."),
	dispatched:  classDesc("neptune_class_dispatched_total", "Requests of the class the scheduler started."),
	completions: classDesc("neptune_class_completions_total", "Requests of the class that finished."),
	abandoned:   classDesc("neptune_class_abandoned_total", "Requests of the class dispatched after their caller had given up, so never run."),
	drops:       classDesc("neptune_class_drops_total", "Requests of the class dropped in the queue because they could no longer earn yield (answered ErrDeadline)."),
	offered:     classDesc("neptune_class_offered_yield_total", "Full yield of every arrival of the class."),
	realized:    classDesc("neptune_class_realized_yield_total", "Yield the class's completed requests earned at their response times."),
	wait:        classDesc("neptune_class_queue_wait_seconds_total", "Time the class's dispatched requests spent queued; divide by dispatched for the mean."),
	loss:        classDesc("neptune_class_loss_ratio", "Share (0..1) of the class's offered yield not realized (LossPercent/100)."),
	share:       classDesc("neptune_class_resource_share", "The class's share of the service's decayed resource use on this node (beta = 0.95/s)."),
	windowShare: classDesc("neptune_class_window_share", "The class's share of the resource use charged in the last guarantee window (1 s)."),
	guarantee:   classDesc("neptune_class_guarantee", "The class's guaranteed resource share."),
	queued:      classDesc("neptune_class_queued", "Requests of the class waiting in the node scheduler."),
	inFlight:    classDesc("neptune_class_in_flight", "Requests of the class running."),
	mode: prometheus.NewDesc("neptune_sched_mode", "1 for the policy the service's scheduler applies now (Adaptive resolves to yid or greedy).",
		[]string{"service", "policy"}, nil),
}

func classDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, []string{"service", "class"}, nil)
}

// classCollector exports the class schedulers' statistics. Collecting
// takes each service's pool lock once, so scrapes cost O(classes).
type classCollector struct{ n *Node }

func (c *classCollector) Describe(ch chan<- *prometheus.Desc) {
	d := &classDescs
	for _, desc := range []*prometheus.Desc{d.arrivals, d.dispatched, d.completions, d.abandoned, d.drops, d.offered, d.realized, d.wait,
		d.loss, d.share, d.windowShare, d.guarantee, d.queued, d.inFlight, d.mode} {
		ch <- desc
	}
}

func (c *classCollector) Collect(ch chan<- prometheus.Metric) {
	names := make([]string, 0, len(c.n.services))
	for name := range c.n.services {
		names = append(names, name)
	}
	slices.Sort(names)
	d := &classDescs
	for _, svc := range names {
		st, ok := c.n.services[svc].pool.Stats()
		if !ok {
			continue
		}
		ch <- prometheus.MustNewConstMetric(d.mode, prometheus.GaugeValue, 1, svc, st.Mode.String())
		for _, k := range st.Classes {
			counter := func(desc *prometheus.Desc, v float64) {
				ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, v, svc, k.Name)
			}
			gauge := func(desc *prometheus.Desc, v float64) {
				ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, svc, k.Name)
			}
			counter(d.arrivals, float64(k.Arrivals))
			counter(d.dispatched, float64(k.Dispatched))
			counter(d.completions, float64(k.Completions))
			counter(d.abandoned, float64(k.Abandoned))
			counter(d.drops, float64(k.Drops))
			counter(d.offered, k.OfferedYield)
			counter(d.realized, k.RealizedYield)
			counter(d.wait, k.QueueWait.Seconds())
			gauge(d.loss, k.LossPercent()/100)
			gauge(d.share, k.Share)
			gauge(d.windowShare, k.WindowShare)
			gauge(d.guarantee, k.Guarantee)
			gauge(d.queued, float64(k.Queued))
			gauge(d.inFlight, float64(k.InFlight))
		}
	}
}

var (
	storageCorruptionDesc = prometheus.NewDesc("neptune_storage_corruption_total",
		"Corruption detected in a replica's write log since the node started, by kind of file (wal, table, manifest, options, store).",
		[]string{"service", "partition", "kind"}, nil)
	storageFullDesc = prometheus.NewDesc("neptune_storage_full",
		"1 while the data directory is below its reserve (writes refused, primaries handed over), else 0.", nil, nil)
	storageFreeDesc = prometheus.NewDesc("neptune_storage_free_bytes",
		"Free bytes in the data directory's file system, as last measured.", nil, nil)
)

// storageCollector reports the replication runtime's data directory:
// corruption found, and whether it is full.
type storageCollector struct{ repl *replication.Runtime }

func (storageCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- storageCorruptionDesc
	ch <- storageFullDesc
	ch <- storageFreeDesc
}

func (c storageCollector) Collect(ch chan<- prometheus.Metric) {
	for _, k := range c.repl.Corruption() {
		ch <- prometheus.MustNewConstMetric(storageCorruptionDesc, prometheus.CounterValue, float64(k.Count),
			k.Service, strconv.Itoa(int(k.Partition)), k.Kind)
	}
	full, free := c.repl.StorageState()
	v := 0.0
	if full {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(storageFullDesc, prometheus.GaugeValue, v)
	ch <- prometheus.MustNewConstMetric(storageFreeDesc, prometheus.GaugeValue, float64(free))
}
