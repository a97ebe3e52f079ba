package adapter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/propagation"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/internal/obs"
)

// ExecConfig hosts an executable run once per request (YAML key
// services[i].exec). It runs in the partition's data directory
// (data_dir/<partition>, created if missing) with the request on stdin;
// its stdout is the answer.
type ExecConfig struct {
	// Command is the program, a path or a name looked up in PATH.
	Command string   `yaml:"command"`
	Args    []string `yaml:"args"`
	// DataDir holds one directory per partition.
	DataDir string `yaml:"data_dir"`
	// Timeout bounds one run (default 30s); at the deadline, or the
	// caller's if earlier, the program and its process group are killed.
	Timeout time.Duration `yaml:"timeout"`
	// OKExitCodes are the exit codes that mean success (default [0]); grep,
	// for example, exits 1 when nothing matched.
	OKExitCodes []int `yaml:"ok_exit_codes"`
	// MaxRequest caps the request body written to stdin, MaxResponse the
	// bytes kept from stdout (default DefaultMaxBody each): larger ones
	// fail with neptune.ErrTooLarge.
	MaxRequest  int64          `yaml:"max_request"`
	MaxResponse int64          `yaml:"max_response"`
	Methods     []MethodConfig `yaml:"methods"`
	// Aggregate declares aggregation operators, each a run of the
	// command with its own args (aggregate.go): a local operator in the
	// partition's directory, a reduction in data_dir.
	Aggregate *AggregateConfig `yaml:"aggregate"`
}

// Validate checks the config; messages name the YAML field under "exec".
func (c ExecConfig) Validate() error {
	switch {
	case c.Command == "":
		return errors.New("exec.command is required")
	case c.DataDir == "":
		return errors.New("exec.data_dir is required: each partition runs in data_dir/<partition>")
	case c.Timeout < 0:
		return fmt.Errorf("exec.timeout must be >= 0, got %v", c.Timeout)
	case c.MaxResponse < 0:
		return fmt.Errorf("exec.max_response must be >= 0, got %d", c.MaxResponse)
	case c.MaxRequest < 0:
		return fmt.Errorf("exec.max_request must be >= 0, got %d", c.MaxRequest)
	}
	for i, code := range c.OKExitCodes {
		if code < 0 || code > 255 {
			return fmt.Errorf("exec.ok_exit_codes[%d]: %d is not an exit code (0..255)", i, code)
		}
	}
	if err := validateMethods("exec", c.Methods, c.Aggregate != nil); err != nil {
		return err
	}
	if err := c.Aggregate.validate("exec.aggregate", false); err != nil {
		return err
	}
	for i, m := range c.Methods {
		if m.Route != "" || m.Verb != "" || m.Passthrough || m.Stream {
			return fmt.Errorf("exec.methods[%d]: route, verb, passthrough and stream are for http services only", i)
		}
	}
	return nil
}

// NewExec returns the service name backed by the executable in c. Exit
// codes outside ok_exit_codes wrap ErrProgram with the code and the end of
// stderr; a run killed at the deadline wraps neptune.ErrDeadline; a
// program that cannot be started wraps ErrUnreachable.
func NewExec(name string, c ExecConfig) (neptune.Service, error) {
	if err := c.Validate(); err != nil {
		return neptune.Service{}, fmt.Errorf("adapter: %w", err)
	}
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Second
	}
	if len(c.OKExitCodes) == 0 {
		c.OKExitCodes = []int{0}
	}
	c.MaxRequest, c.MaxResponse = orDefault(c.MaxRequest), orDefault(c.MaxResponse)
	svc := neptune.Service{Name: name}
	for _, m := range c.Methods {
		mode, _ := neptune.ParseMode(m.Mode)
		args := c.Args
		if m.Args != nil {
			args = m.Args
		}
		svc.Methods = append(svc.Methods, neptune.Method{Name: m.Name, Mode: mode, Handler: func(ctx context.Context, r *neptune.Request) (*neptune.Response, error) {
			out, used, err := c.run(ctx, args, r)
			if err != nil {
				return nil, err
			}
			return &neptune.Response{Body: out, Version: r.LSN, Used: used}, nil
		}})
	}
	svc.Aggregate = c.Aggregate.aggregator(c.operator)
	return svc, nil
}

// operator runs an aggregation operator: the command with op's args (the
// command's own if op has none), told the operator in NEPTUNE_OPERATOR
// and NEPTUNE_METHOD, body on stdin, stdout its result. A reduction
// (partition -1) runs in data_dir and has no NEPTUNE_PARTITION.
func (c ExecConfig) operator(ctx context.Context, kind string, op OperatorConfig, partition int, body []byte) ([]byte, error) {
	args := c.Args
	if op.Args != nil {
		args = op.Args
	}
	dir := c.DataDir
	env := []string{"NEPTUNE_OPERATOR=" + kind, "NEPTUNE_METHOD=" + op.Name}
	if partition >= 0 {
		dir = filepath.Join(c.DataDir, strconv.Itoa(partition))
		env = append(env, "NEPTUNE_PARTITION="+strconv.Itoa(partition))
	}
	out, err := c.runCmd(ctx, args, dir, append(env, "NEPTUNE_DATA_DIR="+dir), body)
	return out.stdout, err
}

// run runs the program once. Besides its output it returns what the
// program used (childUsage: its rusage, its own waited-for children
// included), which the node adds to the request's Gage usage: the
// handler's thread only waits for the program and would otherwise be
// charged next to nothing.
func (c ExecConfig) run(ctx context.Context, args []string, r *neptune.Request) ([]byte, neptune.Usage, error) {
	dir := filepath.Join(c.DataDir, strconv.Itoa(r.Partition))
	out, err := c.runCmd(ctx, args, dir, []string{
		"NEPTUNE_PARTITION=" + strconv.Itoa(r.Partition),
		"NEPTUNE_LSN=" + strconv.FormatUint(r.LSN, 10),
		"NEPTUNE_METHOD=" + r.Method,
		"NEPTUNE_DATA_DIR=" + dir,
	}, r.Body)
	var used neptune.Usage
	if out.cmd != nil && out.cmd.ProcessState != nil {
		used = childUsage(out.cmd.ProcessState)
	}
	return out.stdout, used, err
}

type execResult struct {
	cmd    *exec.Cmd
	stdout []byte
}

// runCmd runs the command once in dir, with env added to the node's
// environment and stdin as its input.
func (c ExecConfig) runCmd(ctx context.Context, args []string, dir string, env []string, stdin []byte) (execResult, error) {
	var res execResult
	if int64(len(stdin)) > c.MaxRequest {
		return res, fmt.Errorf("%w: %s: request body of %d bytes exceeds exec.max_request (%d); not run", neptune.ErrTooLarge, c.Command, len(stdin), c.MaxRequest)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, fmt.Errorf("%w: %s: data dir: %v", ErrUnreachable, c.Command, err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Command, args...)
	res.cmd = cmd
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), env...), traceEnv(ctx)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout capped
	stdout.max = c.MaxResponse
	var stderr capped
	stderr.max = 64 << 10
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	killGroup(cmd)
	// Grandchildren that keep stdout open must not hold Wait past the kill.
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		return res, fmt.Errorf("%w: %s killed after %v: %s", neptune.ErrDeadline, c.Command, c.Timeout, strings.TrimSpace(tail(stderr.buf.Bytes(), 512)))
	}
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		code := exitErr.ExitCode()
		if code < 0 || !slices.Contains(c.OKExitCodes, code) {
			return res, fmt.Errorf("%w: %s: %v: %s", ErrProgram, c.Command, exitErr, strings.TrimSpace(tail(stderr.buf.Bytes(), 512)))
		}
	case err != nil:
		return res, fmt.Errorf("%w: %s: %v", ErrUnreachable, c.Command, err)
	}
	if stdout.over {
		return res, fmt.Errorf("%w: %s: output exceeds exec.max_response (%d bytes)", neptune.ErrTooLarge, c.Command, c.MaxResponse)
	}
	res.stdout = stdout.buf.Bytes()
	return res, nil
}

// capped keeps the first max bytes written and notes whether more came;
// it never fails a write, so the program is not killed by a broken pipe.
type capped struct {
	buf  bytes.Buffer
	max  int64
	over bool
}

func (w *capped) Write(p []byte) (int, error) {
	room := w.max - int64(w.buf.Len())
	if int64(len(p)) > room {
		w.over = true
		w.buf.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return w.buf.Write(p)
}

// traceEnv tells a program which call it runs for, as environment
// variables (the carrier OpenTelemetry specifies for processes):
// TRACEPARENT and TRACESTATE, the handler's W3C trace context when the
// node traces, and NEPTUNE_REQUEST_ID, the call's request id.
func traceEnv(ctx context.Context) []string {
	var env []string
	c := propagation.MapCarrier{}
	obs.Propagator.Inject(ctx, c)
	for k, v := range c {
		env = append(env, strings.ToUpper(k)+"="+v)
	}
	if id := obs.RequestID(ctx); id != "" {
		env = append(env, "NEPTUNE_REQUEST_ID="+id)
	}
	return env
}
