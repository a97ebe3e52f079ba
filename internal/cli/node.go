package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/internal/membership"
)

// nodeOptions are the flags of `neptune node`. Every flag but --log-level
// overrides a key of the config file, and only when given on the command
// line, so the defaults shown in help are the node's own.
type nodeOptions struct {
	config, id, host, metrics, zone, policy, dataDir, logLevel string
	gossipPort, rpcPort, pollPort                              int
	pprof                                                      bool
	interval, ttl                                              time.Duration
	join, services                                             []string
	sec                                                        securityFlags
	maxInflight                                                Bytes
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
  neptune node --config examples/node.yaml --id n3
  neptune node --id lab --insecure --service echo:0`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fc, err := o.fileConfig(cmd.Flags())
			if err != nil {
				return err
			}
			log, err := logger(o.logLevel)
			if err != nil {
				return err
			}
			return runNode(cmd.Context(), cmd.OutOrStdout(), fc, log)
		},
	}
	o.addFlags(cmd.Flags())
	_ = cmd.MarkFlagFilename("config", "yaml", "yml")
	_ = cmd.MarkFlagDirname("data-dir")
	_ = cmd.MarkFlagDirname("tls-dir")
	_ = cmd.RegisterFlagCompletionFunc("balance", fixedCompletion(balance.Names...))
	_ = cmd.RegisterFlagCompletionFunc("log-level", fixedCompletion(logLevels...))
	return cmd
}

func (o *nodeOptions) addFlags(fs *pflag.FlagSet) {
	fs.SortFlags = false
	fs.StringVar(&o.config, "config", "", "YAML config `file`; flags override its keys")
	fs.StringVar(&o.id, "id", "", "node id, unique in the cluster (config: id)")
	fs.StringVar(&o.host, "host", "127.0.0.1", "address every listener binds to (config: host)")
	fs.IntVar(&o.gossipPort, "gossip-port", 0, "memberlist port, UDP and TCP; 0 picks a free one (config: gossip_port)")
	fs.IntVar(&o.rpcPort, "rpc-port", 0, "gRPC port; 0 picks a free one (config: rpc_port)")
	fs.IntVar(&o.pollPort, "poll-port", 0, "UDP load-poll port; 0 picks a free one (config: poll_port)")
	fs.StringSliceVar(&o.join, "join", nil, "gossip `host:port` of a node to join; list (config: join)")
	fs.StringArrayVar(&o.services, "service", nil, "host a built-in service as `name:partitions`, e.g. kv:0-3,7; repeatable (config: services)")
	fs.StringVar(&o.metrics, "metrics", "", "`host:port` serving Prometheus /metrics; empty disables (config: metrics)")
	fs.StringVar(&o.zone, "zone", "", "this node's failure domain, announced; placement spreads replicas across zones (config: zone)")
	fs.BoolVar(&o.pprof, "pprof", false, "also serve /debug/pprof/ on the metrics address (config: pprof)")
	fs.StringVar(&o.policy, "balance", balance.DefaultConfig().Policy, "load-balancing `policy`: "+strings.Join(balance.Names, ", ")+" (config: balance.policy)")
	fs.DurationVar(&o.interval, "announce-interval", membership.DefaultAnnounceInterval, "yellow-page refresh interval (config: announce_interval)")
	fs.DurationVar(&o.ttl, "announce-ttl", membership.DefaultTTL, "yellow-page entry lifetime (config: announce_ttl)")
	fs.StringVar(&o.dataDir, "data-dir", "", "`directory` for replicated services' write logs and state (config: data_dir)")
	fs.Var(&o.maxInflight, "max-inflight-bytes", "request bytes the node holds at once, e.g. 64MiB (the default); a call beyond it is refused, retryable, before its body is read (config: max_inflight_bytes)")
	o.sec.add(fs, "", "the node")
	fs.StringVar(&o.logLevel, "log-level", "info", "log `level`: "+strings.Join(logLevels, ", "))
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
	set("gossip-port", func() { fc.GossipPort = o.gossipPort })
	set("rpc-port", func() { fc.RPCPort = o.rpcPort })
	set("poll-port", func() { fc.PollPort = o.pollPort })
	set("join", func() { fc.Join = o.join })
	set("metrics", func() { fc.Metrics = o.metrics })
	set("zone", func() { fc.Zone = o.zone })
	set("pprof", func() { fc.Pprof = o.pprof })
	set("balance", func() { fc.Balance.Policy = o.policy })
	set("announce-interval", func() { fc.AnnounceInterval = Duration(o.interval) })
	set("announce-ttl", func() { fc.AnnounceTTL = Duration(o.ttl) })
	set("data-dir", func() { fc.DataDir = o.dataDir })
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

// runNode starts a node from a validated config and runs it until ctx ends.
func runNode(ctx context.Context, stdout io.Writer, fc FileConfig, log *slog.Logger) error {
	node, err := buildNode(fc, log)
	if err != nil {
		return err
	}
	if err := node.Start(ctx); err != nil {
		return err
	}
	dash := ""
	if a := node.MetricsAddr(); a != "" {
		dash = ", dashboard http://" + a + "/"
	}
	fmt.Fprintf(stdout, "node %s up: gossip %s, rpc %s%s\n", fc.ID, node.GossipAddr(), node.RPCAddr(), dash)
	<-ctx.Done()
	return node.Close()
}

var logLevels = []string{"debug", "info", "warn", "error"}

// logger returns a text logger on stderr at level.
func logger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, Usagef("--log-level %q: want one of %s", level, strings.Join(logLevels, ", "))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}

// fixedCompletion completes a flag's value from a fixed list.
func fixedCompletion(values ...string) cobra.CompletionFunc {
	return cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp)
}

// buildNode creates a node from a validated config with its services.
func buildNode(fc FileConfig, log *slog.Logger) (*neptune.Node, error) {
	bal, err := fc.Balance.toBalance()
	if err != nil {
		return nil, err
	}
	sec, err := fc.Security.toSecurity()
	if err != nil {
		return nil, err
	}
	node, err := neptune.NewNode(neptune.NodeConfig{
		Security:         sec,
		ID:               fc.ID,
		Host:             fc.Host,
		GossipPort:       fc.GossipPort,
		RPCPort:          fc.RPCPort,
		PollPort:         fc.PollPort,
		MetricsAddr:      fc.Metrics,
		Zone:             fc.Zone,
		Pprof:            fc.Pprof,
		Join:             fc.Join,
		AnnounceInterval: time.Duration(fc.AnnounceInterval),
		AnnounceTTL:      time.Duration(fc.AnnounceTTL),
		Balance:          bal,
		Logger:           log,
		DataDir:          fc.DataDir,
		MaxInflightBytes: int64(fc.MaxInflightBytes),
		Placement: neptune.Placement{Off: fc.Placement.Off, Grace: time.Duration(fc.Placement.Grace),
			Interval: time.Duration(fc.Placement.Interval), MaxInFlight: fc.Placement.MaxInFlight},
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
