package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/trace"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/internal/membership"
	"github.com/neptune-cluster/neptune/internal/version"
)

// nodeOptions are the flags of `neptune node`. Every flag but --log-level
// overrides a key of the config file, and only when given on the command
// line, so the defaults shown in help are the node's own.
type nodeOptions struct {
	config, id, host, advertise, metrics, zone, policy, dataDir, logLevel string
	logFormat, otlpEndpoint                                               string
	sampleRatio                                                           float64
	gossipPort, rpcPort, pollPort                                         int
	pprof                                                                 bool
	interval, ttl, joinTimeout, drainTimeout                              time.Duration
	join, services                                                        []string
	serviceBalance                                                        map[string]string
	sec                                                                   securityFlags
	maxInflight                                                           Bytes
}

func newNodeCmd() *cobra.Command {
	var o nodeOptions
	cmd := &cobra.Command{
		Use:   "node [--config file.yaml] [flags]",
		Short: "Run a node hosting services",
		Long: `Run a node hosting services until interrupted.

The node is configured by a YAML file (--config, see examples/node.yaml),
by flags, or both: a flag given on the command line overrides the file's
key named in its help; --service adds to the file's services.

A node runs secured: --tls-dir names the directory with the cluster's
ca.pem and the node's node-<id>.pem and node-<id>-key.pem, and the gossip
keyring (default <tls-dir>/keyring.json); see neptune tls and neptune
keyring. --insecure runs without any protection, and must be said.`,
		Example: `  neptune node --id n1 --tls-dir pki --gossip-port 7946 --service echo:0 --service kv:0-3
  neptune node --id n2 --tls-dir pki --join 127.0.0.1:7946 --service kv:0-3
  neptune node --config examples/node.yaml --id n3 --data-dir data/n3 --gossip-port 7948
  neptune node --id lab --insecure --service echo:0`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fc, err := o.fileConfig(cmd.Flags())
			if err != nil {
				return err
			}
			level, err := parseLevel(fc.LogLevel)
			if err != nil {
				return err
			}
			var lv slog.LevelVar
			lv.Set(level)
			log, err := newLogger(os.Stderr, fc.LogFormat, &lv)
			if err != nil {
				return err
			}
			reload := func() (FileConfig, error) { return o.fileConfig(cmd.Flags()) }
			return runNode(cmd.Context(), cmd.OutOrStdout(), fc, log, &lv, reload)
		},
	}
	o.addFlags(cmd.Flags())
	cmd.AddCommand(newNodeDrainCmd())
	_ = cmd.MarkFlagFilename("config", "yaml", "yml")
	_ = cmd.MarkFlagDirname("data-dir")
	_ = cmd.MarkFlagDirname("tls-dir")
	_ = cmd.RegisterFlagCompletionFunc("balance", fixedCompletion(balance.Names...))
	_ = cmd.RegisterFlagCompletionFunc("log-level", fixedCompletion(logLevels...))
	_ = cmd.RegisterFlagCompletionFunc("log-format", fixedCompletion(logFormats...))
	return cmd
}

func (o *nodeOptions) addFlags(fs *pflag.FlagSet) {
	fs.SortFlags = false
	fs.StringVar(&o.config, "config", "", "YAML config `file`; flags override its keys")
	fs.StringVar(&o.id, "id", "", "node id, unique in the cluster (config: id)")
	fs.StringVar(&o.host, "host", "127.0.0.1", "address every listener binds to: an IP, 0.0.0.0 or :: for every interface, or a host name (config: host)")
	fs.StringVar(&o.advertise, "advertise", "", "host others dial for every listener, e.g. the container's service name; default --host if it names one address, else the local address on the route to the first --join (config: advertise)")
	fs.IntVar(&o.gossipPort, "gossip-port", 0, "memberlist port, UDP and TCP; 0 picks a free one (config: gossip_port)")
	fs.IntVar(&o.rpcPort, "rpc-port", 0, "gRPC port; 0 picks a free one (config: rpc_port)")
	fs.IntVar(&o.pollPort, "poll-port", 0, "UDP load-poll port; 0 picks a free one (config: poll_port)")
	fs.StringSliceVar(&o.join, "join", nil, "gossip `host:port` of a node to join; list (config: join)")
	fs.DurationVar(&o.joinTimeout, "join-timeout", 0, "how long to keep trying the --join seeds at start, with backoff; 0 keeps trying until stopped (config: join_timeout)")
	fs.DurationVar(&o.drainTimeout, "drain-timeout", neptune.DefaultDrainTimeout, "bound on draining at SIGTERM: handing primaries over, then finishing calls in flight (config: drain_timeout)")
	fs.StringArrayVar(&o.services, "service", nil, "host a built-in service as `name:partitions`, e.g. kv:0-3,7; repeatable (config: services)")
	fs.StringVar(&o.metrics, "metrics", "", "`host:port` serving Prometheus /metrics; empty disables (config: metrics)")
	fs.StringVar(&o.zone, "zone", "", "this node's failure domain, announced; placement spreads replicas across zones (config: zone)")
	fs.BoolVar(&o.pprof, "pprof", false, "also serve /debug/pprof/ on the metrics address (config: pprof)")
	fs.StringVar(&o.policy, "balance", balance.DefaultConfig().Policy, "load-balancing `policy`: "+strings.Join(balance.Names, ", ")+" (config: balance.policy)")
	fs.StringToStringVar(&o.serviceBalance, "balance-service", nil, "a service's own load-balancing policy as `service=policy`, e.g. pcache=affinity; repeatable, adds to the file's (config: balance.services)")
	fs.DurationVar(&o.interval, "announce-interval", membership.DefaultAnnounceInterval, "yellow-page refresh interval (config: announce_interval)")
	fs.DurationVar(&o.ttl, "announce-ttl", membership.DefaultTTL, "yellow-page entry lifetime (config: announce_ttl)")
	fs.StringVar(&o.dataDir, "data-dir", "", "`directory` for replicated services' write logs and state (config: data_dir)")
	fs.Var(&o.maxInflight, "max-inflight-bytes", "request bytes the node holds at once, e.g. 64MiB (the default); a call beyond it is refused, retryable, before its body is read (config: max_inflight_bytes)")
	o.sec.add(fs, "", "the node")
	fs.StringVar(&o.logLevel, "log-level", "info", "log `level`: "+strings.Join(logLevels, ", ")+"; SIGHUP re-reads it from the config file (config: log_level)")
	fs.StringVar(&o.logFormat, "log-format", "text", "log `format`: "+strings.Join(logFormats, ", ")+" (config: log_format)")
	addTracingFlags(fs, &o.otlpEndpoint, &o.sampleRatio)
}

// addTracingFlags adds --otlp-endpoint and --trace-sample-ratio.
func addTracingFlags(fs *pflag.FlagSet, endpoint *string, ratio *float64) {
	fs.StringVar(endpoint, "otlp-endpoint", "", "OpenTelemetry collector `URL` receiving traces over OTLP/gRPC, e.g. http://127.0.0.1:4317; empty: the OTel SDK's OTEL_EXPORTER_OTLP_ENDPOINT if set, else tracing off (config: otlp_endpoint)")
	fs.Float64Var(ratio, "trace-sample-ratio", 1, "share of the traces started here that are recorded, 0..1; a call its caller sampled is recorded anyway (config: trace_sample_ratio)")
}

// fileConfig reads --config, applies the flags set on the command line
// (fs says which) and validates the result.
func (o *nodeOptions) fileConfig(fs *pflag.FlagSet) (FileConfig, error) {
	var fc FileConfig
	if o.config != "" {
		var err error
		if fc, err = readConfig(o.config); err != nil {
			return fc, err
		}
	}
	set := func(name string, apply func()) {
		if fs.Changed(name) {
			apply()
		}
	}
	set("id", func() { fc.ID = o.id })
	set("host", func() { fc.Host = o.host })
	set("advertise", func() { fc.Advertise = o.advertise })
	set("gossip-port", func() { fc.GossipPort = o.gossipPort })
	set("rpc-port", func() { fc.RPCPort = o.rpcPort })
	set("poll-port", func() { fc.PollPort = o.pollPort })
	set("join", func() { fc.Join = o.join })
	set("join-timeout", func() { fc.JoinTimeout = Duration(o.joinTimeout) })
	set("drain-timeout", func() { fc.DrainTimeout = Duration(o.drainTimeout) })
	set("metrics", func() { fc.Metrics = o.metrics })
	set("zone", func() { fc.Zone = o.zone })
	set("pprof", func() { fc.Pprof = o.pprof })
	set("balance", func() { fc.Balance.Policy = o.policy })
	set("balance-service", func() {
		if fc.Balance.Services == nil {
			fc.Balance.Services = map[string]string{}
		}
		maps.Copy(fc.Balance.Services, o.serviceBalance)
	})
	set("announce-interval", func() { fc.AnnounceInterval = Duration(o.interval) })
	set("announce-ttl", func() { fc.AnnounceTTL = Duration(o.ttl) })
	set("data-dir", func() { fc.DataDir = o.dataDir })
	set("log-level", func() { fc.LogLevel = o.logLevel })
	set("log-format", func() { fc.LogFormat = o.logFormat })
	set("otlp-endpoint", func() { fc.Tracing.Endpoint = o.otlpEndpoint })
	set("trace-sample-ratio", func() { r := o.sampleRatio; fc.Tracing.SampleRatio = &r })
	set("max-inflight-bytes", func() { fc.MaxInflightBytes = o.maxInflight })
	o.sec.apply(fs, &fc.Security)
	for _, s := range o.services {
		name, parts, ok := strings.Cut(s, ":")
		if !ok {
			return fc, Usagef("--service %q: want name:partitions, e.g. kv:0-3", s)
		}
		ps, err := ParsePartitions(parts)
		if err != nil {
			return fc, Usagef("--service %q: %w", s, err)
		}
		fc.Services = append(fc.Services, ServiceConfig{Name: name, Partitions: ps})
	}
	return fc, fc.Validate()
}

// runNode starts a node from a validated config and runs it until ctx
// ends. SIGHUP reloads what can change while it runs, and never stops it:
// the log level (reload re-reads the config file; the command line and
// environment still win over it) and the certificate and keyring files.
func runNode(ctx context.Context, stdout io.Writer, fc FileConfig, log *slog.Logger, level *slog.LevelVar, reload func() (FileConfig, error)) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	log.Info("neptune node starting", "version", version.Release, "commit", version.Commit, "id", fc.ID)
	tp, flush, err := fc.Tracing.provider(ctx, "neptune-node", fc.ID)
	if err != nil {
		return err
	}
	defer flush()
	node, err := buildNode(fc, log, tp)
	if err != nil {
		return err
	}
	if err := node.Start(ctx); err != nil {
		return err
	}
	dash := ""
	if a := node.MetricsAddr(); a != "" {
		dash = ", dashboard http://" + a + "/"
		if !fc.Security.Insecure {
			dash = ", dashboard https://" + a + "/ (operator certificate or token)"
		}
	}
	fmt.Fprintf(stdout, "node %s up: gossip %s, rpc %s%s\n", fc.ID, node.GossipAddr(), node.RPCAddr(), dash)
	for {
		select {
		case <-ctx.Done():
			// SIGTERM or SIGINT: drain (main's signal context ended).
			node.Drain(context.WithoutCancel(ctx))
			return nil
		case <-node.Done():
			return nil // drained by an operator (neptune node drain)
		case <-hup:
			onHangup(log, level, reload, node.ReloadSecurity, node.SetPlacement)
		}
	}
}

// onHangup applies a SIGHUP: the config file's log level and placement
// settings, then the security files. What fails to load is logged and changes nothing.
func onHangup(log *slog.Logger, level *slog.LevelVar, reload func() (FileConfig, error), reloadSecurity func() error, setPlacement func(neptune.Placement) error) {
	fc, err := reload()
	if err != nil {
		log.Error("SIGHUP: config not reloaded; the node runs on as it was", "err", err)
	} else {
		if l, err := parseLevel(fc.LogLevel); err != nil {
			log.Error("SIGHUP: log level not changed", "err", err)
		} else if l != level.Level() {
			log.Info("SIGHUP: log level changed", "from", level.Level(), "to", l)
			level.Set(l)
		}
		if err := setPlacement(fc.Placement.toPlacement()); err != nil {
			log.Error("SIGHUP: placement settings not changed", "err", err)
		}
	}
	if err := reloadSecurity(); err != nil {
		log.Error("SIGHUP: certificates or keyring not reloaded; the node keeps the ones it had", "err", err)
		return
	}
	log.Info("SIGHUP: configuration reloaded")
}

var logLevels = []string{"debug", "info", "warn", "error"}

// logger returns a logger on stderr in format at level.
func logger(level, format string) (*slog.Logger, error) {
	l, err := parseLevel(level)
	if err != nil {
		return nil, err
	}
	return newLogger(os.Stderr, format, l)
}

// parseLevel reads a log level ("" is info).
func parseLevel(level string) (slog.Level, error) {
	var l slog.Level
	if level == "" {
		return slog.LevelInfo, nil
	}
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return l, Usagef("--log-level %q (config: log_level): want one of %s", level, strings.Join(logLevels, ", "))
	}
	return l, nil
}

// fixedCompletion completes a flag's value from a fixed list.
func fixedCompletion(values ...string) cobra.CompletionFunc {
	return cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp)
}

// buildNode creates a node from a validated config with its services.
func buildNode(fc FileConfig, log *slog.Logger, tp trace.TracerProvider) (*neptune.Node, error) {
	bal, services, err := fc.Balance.toBalance()
	if err != nil {
		return nil, err
	}
	sec, err := fc.Security.toSecurity()
	if err != nil {
		return nil, err
	}
	if err := nodeFiles(fc); err != nil {
		return nil, err
	}
	node, err := neptune.NewNode(neptune.NodeConfig{
		Security:         sec,
		ID:               fc.ID,
		Host:             fc.Host,
		Advertise:        fc.Advertise,
		GossipPort:       fc.GossipPort,
		RPCPort:          fc.RPCPort,
		PollPort:         fc.PollPort,
		MetricsAddr:      fc.Metrics,
		Zone:             fc.Zone,
		Pprof:            fc.Pprof,
		Join:             fc.Join,
		JoinTimeout:      joinTimeout(fc.JoinTimeout),
		DrainTimeout:     time.Duration(fc.DrainTimeout),
		AnnounceInterval: time.Duration(fc.AnnounceInterval),
		AnnounceTTL:      time.Duration(fc.AnnounceTTL),
		Balance:          bal,
		ServiceBalance:   services,
		Logger:           log,
		TracerProvider:   tp,
		DataDir:          fc.DataDir,
		MaxInflightBytes: int64(fc.MaxInflightBytes),
		Placement:        fc.Placement.toPlacement(),
		Storage:          neptune.Storage{Reserve: fc.Storage.ReserveBytes, RebuildCorrupt: fc.Storage.RebuildCorrupt},
	})
	if err != nil {
		return nil, err
	}
	for _, s := range fc.Services {
		var svc neptune.Service
		parts := s.Partitions
		if s.Replication != nil {
			if svc, parts, err = replicatedService(fc, s); err != nil {
				return nil, err
			}
			if len(parts) == 0 {
				continue // no replica of this service on this node
			}
		} else if svc, err = s.service(fc.DataDir); err != nil {
			return nil, err
		}
		if s.Workers != 0 {
			svc.Workers = s.Workers
		}
		if s.QueueLimit != 0 {
			svc.QueueLimit = s.QueueLimit
		}
		if err := s.applyClasses(&svc); err != nil {
			return nil, err
		}
		if err := node.Register(svc, parts...); err != nil {
			return nil, err
		}
	}
	return node, nil
}

// nodeFiles checks that the certificate directory holds the CA and the
// node's own certificate before the node loads them, so a missing file
// is reported with the key and flag to fix and the command that makes it.
func nodeFiles(fc FileConfig) error {
	dir := fc.Security.TLSDir
	if fc.Security.Insecure || dir == "" {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, "ca.pem")); err != nil {
		return fmt.Errorf("security.tls_dir (--tls-dir) %s: no ca.pem there (%v): give the directory with the cluster's ca.pem and this node's certificate (neptune tls ca create)", dir, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node-"+fc.ID+".pem")); err != nil {
		return fmt.Errorf("security.tls_dir (--tls-dir) %s holds no certificate for node %s (node-%s.pem): issue it with neptune tls cert create --dir %s --node %s, or check id (--id)", dir, fc.ID, fc.ID, dir, fc.ID)
	}
	return nil
}

// joinTimeout maps the config's join_timeout (0: keep trying until
// stopped, what a node started before its seeds needs) to
// NodeConfig.JoinTimeout (negative: until stopped).
func joinTimeout(d Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return time.Duration(d)
}

// toPlacement is the config file's placement block as the node takes it.
func (p PlacementConfig) toPlacement() neptune.Placement {
	return neptune.Placement{Off: p.Off, Grace: time.Duration(p.Grace), Interval: time.Duration(p.Interval), MaxInFlight: p.MaxInFlight}
}
