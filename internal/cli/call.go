package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/neptune-cluster/neptune"
)

// callOptions are the flags of `neptune call`.
type callOptions struct {
	join                         []string
	service, method, body, class string
	partition                    int
	timeout                      time.Duration
	stream                       bool
	sec                          securityFlags
}

func newCallCmd() *cobra.Command {
	var o callOptions
	cmd := &cobra.Command{
		Use:   "call --join host:port --service name --method name [flags]",
		Short: "Call one method and print the response",
		Long: `Call one method of a service partition through any node of the cluster
and print the response body. Whether the method reads or writes is what the
service declares; the call does not name it.

With --stream the method is a stream method: a bidirectional stream is
opened with one replica, every line read from stdin is sent as one
message (without its newline) and every answer is printed on a line of
its own; at the end of stdin the stream is closed and the remaining
answers printed. On a write stream each line is a write applied exactly
once; if the stream breaks, the error says which lines were applied.
--timeout then bounds the whole stream only if it is given.`,
		Example: `  neptune call --tls-dir pki --join 127.0.0.1:7946 --service kv --partition 1 --method put --body k=v
  neptune call --tls-dir pki --cert client/web --join 127.0.0.1:7946 --service kv --partition 1 --method get --body k
  printf 'a=1\na=2\n' | neptune call --tls-dir pki --join 127.0.0.1:7946 --service listappend --method append-stream --stream`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.stream {
				if !cmd.Flags().Changed("timeout") {
					o.timeout = 0
				}
				if o.body != "" {
					return fmt.Errorf("--body with --stream: a stream's messages are stdin's lines")
				}
				return o.runStream(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout())
			}
			return o.run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	joinFlag(fs, &o.join)
	fs.StringVar(&o.service, "service", "", "service `name` (required)")
	fs.IntVar(&o.partition, "partition", 0, "partition `number`")
	fs.StringVar(&o.method, "method", "", "method `name` (required)")
	fs.StringVar(&o.body, "body", "", "request body as `text`")
	fs.StringVar(&o.class, "class", "", "service `class` of the request (see the service's classes)")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Second, "deadline for the call (with --stream: none unless given)")
	fs.BoolVar(&o.stream, "stream", false, "open a bidirectional stream: send stdin's lines, print the answers")
	o.sec.add(fs, "client/client", "your client")
	for _, f := range []string{"join", "service", "method"} {
		_ = cmd.MarkFlagRequired(f)
	}
	return cmd
}

func (o *callOptions) run(ctx context.Context, stdout io.Writer) error {
	sec, err := o.sec.clientFiles()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Join: o.join, Security: sec})
	if err != nil {
		return err
	}
	defer c.Close()
	if err := waitForService(ctx, c, o.service); err != nil {
		return err
	}
	resp, err := c.Call(ctx, o.service, o.partition, o.method, []byte(o.body), neptune.WithClass(o.class))
	if err != nil {
		if neptune.Retryable(err) {
			return fmt.Errorf("%w (retryable)", err)
		}
		return err
	}
	fmt.Fprintf(stdout, "%s\n", resp.Body)
	return nil
}

// runStream sends stdin's lines on a bidirectional stream and prints
// the answers as they come.
func (o *callOptions) runStream(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	sec, err := o.sec.clientFiles()
	if err != nil {
		return err
	}
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	c, err := neptune.Dial(ctx, neptune.ClientConfig{Join: o.join, Security: sec})
	if err != nil {
		return err
	}
	defer c.Close()
	if err := waitForService(ctx, c, o.service); err != nil {
		return err
	}
	s, err := c.OpenStream(ctx, o.service, o.partition, o.method, neptune.WithClass(o.class))
	if err != nil {
		return err
	}
	defer s.Close()
	sendErr := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdin)
		sc.Buffer(make([]byte, 64<<10), maxStreamLine)
		for sc.Scan() {
			if err := s.Send(sc.Bytes()); err != nil {
				if err == io.EOF {
					err = nil // the stream ended: Recv says why
				}
				sendErr <- err
				return
			}
		}
		if err := sc.Err(); err != nil {
			sendErr <- fmt.Errorf("reading stdin: %w", err)
			s.Close()
			return
		}
		sendErr <- s.CloseSend()
	}()
	for {
		b, err := s.Recv()
		if err == io.EOF {
			return <-sendErr
		}
		if err != nil {
			select {
			case serr := <-sendErr:
				if serr != nil && !errors.Is(serr, context.Canceled) {
					return serr
				}
			default:
			}
			return err
		}
		if _, err := fmt.Fprintf(stdout, "%s\n", b); err != nil {
			return err
		}
	}
}

// maxStreamLine is the longest stdin line --stream sends (the default
// message limit).
const maxStreamLine = 16 << 20

// waitForService waits briefly until the yellow pages know some node
// hosting service, so a freshly dialled client does not report a service
// as unknown only because gossip has not reached it yet.
func waitForService(ctx context.Context, c *neptune.Client, service string) error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		for _, m := range c.Members(ctx, 0) {
			for _, s := range m.Services {
				if s.Name == service {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return nil // let the call report the precise error
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// joinFlag is the --join flag of every command that reaches a cluster
// through any one of its nodes.
func joinFlag(fs *pflag.FlagSet, dst *[]string) {
	fs.StringSliceVar(dst, "join", nil, "gossip `host:port` of any node; list (required)")
}
