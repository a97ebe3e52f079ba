package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// DefaultHealthAddr is where `neptune health` asks by default: the
// metrics listener a container's node or gateway serves on port 9100
// (deploy/compose.yaml), reached on loopback from inside the container.
const DefaultHealthAddr = "127.0.0.1:9100"

func newHealthCmd() *cobra.Command {
	var (
		addr    string
		live    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "health [--addr host:port] [--live]",
		Short: "Ask a node's or gateway's metrics listener whether it is ready (or live); exit 0 if so",
		Long: `Ask the metrics listener of a node or a gateway (its --metrics address)
for GET /readyz, or /livez with --live, print the answer and exit 0 if it
is 200, 1 otherwise (an error status, no answer within --timeout).

It is the container image's HEALTHCHECK: the image holds only the neptune
binary, no shell or curl. Ready means, for a node: joined, its replicas
open and caught up, not draining; for a gateway: not draining and a node
hosting a service in its yellow pages. See docs/operations.md, Health.`,
		Example: `  neptune health                          # 127.0.0.1:9100/readyz
  neptune health --addr 127.0.0.1:9101 --live`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if timeout <= 0 {
				return Usagef("--timeout must be > 0, got %v", timeout)
			}
			if _, _, err := net.SplitHostPort(addr); err != nil {
				return Usagef("--addr %q: want host:port: %v", addr, err)
			}
			path := "/readyz"
			if live {
				path = "/livez"
			}
			return probe(cmd.Context(), cmd.OutOrStdout(), addr, path, timeout)
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&addr, "addr", DefaultHealthAddr, "`host:port` of the node's or gateway's metrics listener")
	fs.BoolVar(&live, "live", false, "ask /livez (the process serves HTTP) instead of /readyz")
	fs.DurationVar(&timeout, "timeout", 2*time.Second, "how long to wait for the answer")
	return cmd
}

// probe GETs http://addr+path, prints the answer's body and fails unless
// it is 200.
func probe(ctx context.Context, w io.Writer, addr, path string, timeout time.Duration) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return Usagef("--addr %q: %v", addr, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%s%s: no answer within %v", addr, path, timeout)
		}
		return fmt.Errorf("%s%s: %w", addr, path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	text := strings.TrimSpace(string(body))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s%s: %s: %s", addr, path, resp.Status, text)
	}
	fmt.Fprintln(w, text)
	return nil
}
