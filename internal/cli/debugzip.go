package cli

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/neptune-cluster/neptune/internal/dashboard"
)

// debugZipOptions are the flags of `neptune debug zip`.
type debugZipOptions struct {
	join         []string
	file         string
	cpu, timeout time.Duration
	wait         time.Duration
	sec          securityFlags
}

func newDebugCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "debug",
		Short: "Collect what support needs from a cluster",
	}
	cmd.AddCommand(newDebugZipCmd())
	return cmd
}

func newDebugZipCmd() *cobra.Command {
	var o debugZipOptions
	cmd := &cobra.Command{
		Use:   "zip --join host:port [--file F]",
		Short: "Collect every reachable node's status, config, metrics, dashboard, logs and profiles into one zip file",
		Long: `Collect from every node in the yellow pages, in parallel, into one zip
file (cockroach debug zip's way):

  nodes/ID/status.json          the node's identity, release, addresses, services, storage
  nodes/ID/config.json          its configuration, secrets left out
  nodes/ID/metrics.txt          its Prometheus metrics
  nodes/ID/logs.txt             its recent log lines (the last MiB, info and above)
  nodes/ID/goroutines.txt       every goroutine's stack
  nodes/ID/heap.pb.gz           a heap profile (go tool pprof)
  nodes/ID/cpu.pb.gz            a CPU profile of --cpu (0: none)
  nodes/ID/dashboard/VIEW.json  each dashboard view as that node sees it
  cluster/members.json, cluster/departed.json, cluster/partitions.json
                                the yellow pages as this command saw them
  summary.json                  each node and item: collected, or the error

A node that does not answer, or answers some items only, is listed in
summary.json with the errors; the command still writes the file. Only an
operator certificate may collect (the items travel over the node's
mutually authenticated RPC port).`,
		Example: "  neptune debug zip --tls-dir pki --cert operator/alice --join 127.0.0.1:7946 --file debug.zip",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	joinFlag(fs, &o.join)
	fs.StringVar(&o.file, "file", "", "zip `file` to write (default neptune-debug-TIME.zip)")
	fs.DurationVar(&o.cpu, "cpu", 5*time.Second, "length of each node's CPU profile (0: none; at most 60s)")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "how long to wait for each item of a node (beside the CPU profile)")
	fs.DurationVar(&o.wait, "wait", time.Second, "how long to listen for announcements first")
	o.sec.add(fs, "operator/operator", "your operator")
	_ = cmd.MarkFlagRequired("join")
	return cmd
}

// debugFiles are the node items and the files they go to.
var debugFiles = []struct{ item, file string }{
	{"status", "status.json"}, {"config", "config.json"}, {"metrics", "metrics.txt"}, {"logs", "logs.txt"},
	{"goroutine", "goroutines.txt"}, {"heap", "heap.pb.gz"}, {"cpu", "cpu.pb.gz"},
}

// debugEntry is one node's line in summary.json.
type debugEntry struct {
	Node      string            `json:"node"`
	Reachable bool              `json:"reachable"`
	Collected []string          `json:"collected"`
	Errors    map[string]string `json:"errors,omitempty"`
}

func (o *debugZipOptions) run(ctx context.Context, stdout, stderr io.Writer) error {
	if o.cpu < 0 || o.cpu > time.Minute {
		return Usagef("--cpu must be in 0..60s, got %s", o.cpu)
	}
	if o.timeout <= 0 {
		return Usagef("--timeout must be > 0, got %s", o.timeout)
	}
	if o.file == "" {
		o.file = "neptune-debug-" + time.Now().UTC().Format("20060102T150405Z") + ".zip"
	}
	c, err := o.sec.dialAndListen(ctx, o.join, o.wait)
	if err != nil {
		return err
	}
	defer c.Close()
	f, err := os.CreateTemp(filepath.Dir(o.file), ".neptune-debug-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // no-op after the rename
	defer f.Close()
	zw := zip.NewWriter(f)
	var zmu sync.Mutex
	put := func(name string, b []byte) error {
		zmu.Lock()
		defer zmu.Unlock()
		w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate, Modified: time.Now()})
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	js := func(v any) []byte {
		b, _ := json.MarshalIndent(v, "", "  ")
		return append(b, '\n')
	}
	members := c.Members(ctx, 0)
	departed := c.Departed()
	if err := put("cluster/members.json", js(members)); err != nil {
		return err
	}
	if err := put("cluster/departed.json", js(departed)); err != nil {
		return err
	}
	if err := put("cluster/partitions.json", js(c.Partitions())); err != nil {
		return err
	}

	items := slices.Clone(debugFiles)
	if o.cpu == 0 {
		items = slices.DeleteFunc(items, func(x struct{ item, file string }) bool { return x.item == "cpu" })
	}
	for _, v := range dashboard.Views {
		items = append(items, struct{ item, file string }{"dashboard/" + v, "dashboard/" + v + ".json"})
	}
	prog := newProgress(stderr)
	var (
		mu      sync.Mutex
		entries []*debugEntry
		done    int
		wg      sync.WaitGroup
	)
	total := len(members) * len(items)
	for _, m := range members {
		e := &debugEntry{Node: m.Node, Errors: map[string]string{}}
		entries = append(entries, e)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, it := range items {
				limit := o.timeout
				if it.item == "cpu" {
					limit += o.cpu
				}
				ictx, cancel := context.WithTimeout(ctx, limit)
				var buf bytes.Buffer
				err := c.Debug(ictx, m.Node, it.item, int(o.cpu/time.Second), &buf)
				cancel()
				if err == nil {
					err = put("nodes/"+m.Node+"/"+it.file, buf.Bytes())
				}
				mu.Lock()
				if err != nil {
					e.Errors[it.item] = err.Error()
				} else {
					e.Reachable = true
					e.Collected = append(e.Collected, it.file)
				}
				done++
				prog.show("collecting: %d of %d items from %d nodes", done, total, len(members))
				mu.Unlock()
				if err != nil && it.item == "status" {
					// Unreachable or refused: every other item would fail
					// the same way, after as long.
					mu.Lock()
					e.Errors["others"] = "skipped: status failed"
					done += len(items) - 1
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	prog.done()
	for _, d := range departed {
		entries = append(entries, &debugEntry{Node: d.Node, Errors: map[string]string{"*": "departed from the yellow pages at " + d.Left.UTC().Format(time.RFC3339) + ", last seen " + d.LastSeen.UTC().Format(time.RFC3339)}})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Node < entries[j].Node })
	if err := put("summary.json", js(map[string]any{"taken": time.Now().UTC(), "nodes": entries})); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), o.file); err != nil {
		return err
	}
	ok := 0
	var why string
	for _, e := range entries {
		if e.Reachable {
			ok++
		} else if why == "" {
			why = e.Node + ": " + firstError(e.Errors)
		}
	}
	fmt.Fprintf(stdout, "wrote %s: %d of %d nodes answered\n", o.file, ok, len(entries))
	for _, e := range entries {
		switch {
		case !e.Reachable:
			fmt.Fprintf(stdout, "  %s: not reachable (%s)\n", e.Node, firstError(e.Errors))
		case len(e.Errors) > 0:
			fmt.Fprintf(stdout, "  %s: %d items, %d failed (%s)\n", e.Node, len(e.Collected), len(e.Errors), firstError(e.Errors))
		default:
			fmt.Fprintf(stdout, "  %s: %d items\n", e.Node, len(e.Collected))
		}
	}
	if ok == 0 {
		return fmt.Errorf("no node answered (%s)", why)
	}
	return nil
}

// firstError is one of errs, by item name, for a one-line summary.
func firstError(errs map[string]string) string {
	keys := make([]string, 0, len(errs))
	for k := range errs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if msg, ok := errs["status"]; ok {
		return "status: " + msg
	}
	if len(keys) == 0 {
		return ""
	}
	return keys[0] + ": " + errs[keys[0]]
}
