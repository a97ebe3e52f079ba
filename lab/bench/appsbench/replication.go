package appsbench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/auction"
	"github.com/neptune-cluster/neptune/apps/pcache"
	"github.com/neptune-cluster/neptune/lab/bench"
	"github.com/neptune-cluster/neptune/lab/localcluster"
	"github.com/neptune-cluster/neptune/lab/report"
)

// appReplWorkload is one service of the Fig 5.5/5.6 sweep.
type appReplWorkload struct {
	name  string
	level int
	// open builds one node's service on storage under dir.
	open bench.OpenService
	// setup loads the cluster through c before measuring.
	setup func(ctx context.Context, c *neptune.Client) error
	// op issues one request; an answer that is an application error (a
	// bid outbid meanwhile) still counts as served.
	op bench.Op
}

const appReplParts = 4

// benchAppsReplication is dissertation Figs 5.5 and 5.6 at laptop scale:
// auction (level 3, 1 s staleness; 10 % bids, 3 % new items) and
// persistent-cache (level 2, 10 % updates) throughput versus replication
// degree, on 4 in-process nodes with durable storage each. Every cell
// starts a fresh cluster; degrees of one service run back to back.
func benchAppsReplication(ctx context.Context, stdout io.Writer, dir, out string, degs []int, clients int, cell time.Duration) error {
	fmt.Fprintf(stdout, "\nFigs 5.5/5.6: throughput (ops/s) vs replication degree; 4 in-process nodes, %d partitions, %d clients, %v per cell\n", appReplParts, clients, cell)
	fmt.Fprintf(stdout, "%-9s %-6s %s\n", "service", "level", bench.Columns("deg%-7d", degs))
	csv := report.NewTable("service", "level", "degree", "ops_per_s")
	var lines []report.Series
	for _, wl := range []appReplWorkload{auctionWorkload(), pcacheWorkload()} {
		s := report.Series{Name: fmt.Sprintf("%s (level %d)", wl.name, wl.level)}
		row := fmt.Sprintf("%-9s %-6d ", wl.name, wl.level)
		var ratios []string
		for _, d := range degs {
			ops, err := appReplCell(ctx, filepath.Join(dir, fmt.Sprintf("%s-d%d", wl.name, d)), wl, d, clients, cell)
			if err != nil {
				return fmt.Errorf("bench apps: %s degree %d: %w", wl.name, d, err)
			}
			csv.Addf("%s,%d,%d,%.1f", wl.name, wl.level, d, ops)
			s.Add(float64(d), ops)
			row += fmt.Sprintf("%-10.0f", ops)
			ratios = append(ratios, fmt.Sprintf("deg%d %.2f", d, ops/s.Y[0]))
		}
		fmt.Fprintln(stdout, row)
		fmt.Fprintf(stdout, "  %s relative to degree %d: %s\n", wl.name, degs[0], strings.Join(ratios, ", "))
		lines = append(lines, s)
	}
	if err := csv.Save(filepath.Join(out, "apps-fig55-56.csv")); err != nil {
		return err
	}
	return report.Chart{Title: "auction and pcache throughput vs replication degree", XLabel: "degree", YLabel: "ops/s", Series: lines}.Save(filepath.Join(out, "apps-fig55-56.svg"))
}

// appReplCell measures one closed-loop cell on a fresh 4-node cluster.
func appReplCell(ctx context.Context, dir string, wl appReplWorkload, degree, clients int, dur time.Duration) (float64, error) {
	rep := neptune.Replication{Level: wl.level, Degree: degree, Staleness: time.Second}
	for i := range 4 {
		rep.Nodes = append(rep.Nodes, fmt.Sprintf("n%d", i))
	}
	c, stop, err := bench.Replicated(ctx, dir, rep, appReplParts, wl.open)
	if err != nil {
		return 0, err
	}
	defer stop()
	setupCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = wl.setup(setupCtx, c)
	cancel()
	if err != nil {
		return 0, err
	}
	return bench.ClosedLoop(ctx, c, clients, dur, 55, wl.op)
}

// retryWrite retries a write until a primary takes it (a fresh cluster
// elects its primaries in the first few hundred milliseconds).
func retryWrite(ctx context.Context, c *neptune.Client, service string, p int, method string, body []byte) (resp *neptune.Response, err error) {
	err = localcluster.Wait(ctx, 0, func(ctx context.Context) error {
		resp, err = c.Call(ctx, service, p, method, body)
		return err
	})
	return resp, err
}

// auctionWorkload follows §5.4.4's eBay mix: 10 % BidItem, 3 % AddItem,
// the rest ViewItem and ViewCategory, over categories spread evenly.
func auctionWorkload() appReplWorkload {
	const catsPerPart, itemsPerCat = 4, 5
	cats := make([][]string, appReplParts) // per partition
	for i, n := 0, 0; n < appReplParts*catsPerPart; i++ {
		cat := fmt.Sprintf("cat-%d", i)
		if p := auction.Partition(cat, appReplParts); len(cats[p]) < catsPerPart {
			cats[p] = append(cats[p], cat)
			n++
		}
	}
	var (
		mu    sync.Mutex
		items = make([][]int64, appReplParts)
		price atomic.Int64 // bids rise globally, so most beat the current price
	)
	return appReplWorkload{
		name: "auction", level: 3,
		open: func(ctx context.Context, dir string) (neptune.Service, io.Closer, error) {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return neptune.Service{}, nil, err
			}
			a, err := auction.Open(ctx, filepath.Join(dir, "auction.sqlite"))
			if err != nil {
				return neptune.Service{}, nil, err
			}
			return a.Service(), a, nil
		},
		setup: func(ctx context.Context, c *neptune.Client) error {
			mu.Lock()
			defer mu.Unlock()
			for p := range appReplParts {
				items[p] = nil
				for _, cat := range cats[p] {
					for k := range itemsPerCat {
						body, _ := json.Marshal(auction.AddItemRequest{Category: cat, Title: fmt.Sprintf("item %d", k), Seller: "s", StartPrice: 100})
						resp, err := retryWrite(ctx, c, "auction", p, "AddItem", body)
						if err != nil {
							return err
						}
						var out auction.AddItemResponse
						if err := json.Unmarshal(resp.Body, &out); err != nil {
							return err
						}
						items[p] = append(items[p], out.ID)
					}
				}
			}
			price.Store(100)
			return nil
		},
		op: func(ctx context.Context, c *neptune.Client, sess *neptune.Session, rng *rand.Rand) error {
			p := rng.IntN(appReplParts)
			mu.Lock()
			id := items[p][rng.IntN(len(items[p]))]
			mu.Unlock()
			cat := cats[p][rng.IntN(len(cats[p]))]
			var (
				method = "ViewItem"
				body   any
			)
			switch x := rng.IntN(100); {
			case x < 10:
				method, body = "BidItem", auction.BidItemRequest{Item: id, Bidder: "b", Amount: price.Add(1)}
			case x < 13:
				method, body = "AddItem", auction.AddItemRequest{Category: cat, Title: "new", Seller: "s", StartPrice: 1}
			case x < 56:
				method, body = "ViewCategory", auction.ViewCategoryRequest{Category: cat}
			default:
				body = auction.ViewItemRequest{ID: id}
			}
			b, _ := json.Marshal(body)
			_, err := c.Call(ctx, "auction", p, method, b, neptune.WithSession(sess))
			if err != nil && strings.Contains(err.Error(), auction.ErrBidTooLow.Error()) {
				return nil // served: outbid by a concurrent bid
			}
			return err
		},
	}
}

// pcacheWorkload is §5.4.4's persistent cache: level 2, 10 % CacheUpdate,
// 90 % CacheLookup over 1000 keys per partition, 1 KiB values.
func pcacheWorkload() appReplWorkload {
	value := strings.Repeat("v", 1024)
	return appReplWorkload{
		name: "pcache", level: 2,
		open: func(_ context.Context, dir string) (neptune.Service, io.Closer, error) {
			pc, err := pcache.Open(dir)
			if err != nil {
				return neptune.Service{}, nil, err
			}
			return pc.Service(), pc, nil
		},
		setup: func(ctx context.Context, c *neptune.Client) error {
			for p := range appReplParts {
				body, _ := json.Marshal(pcache.UpdateRequest{Key: "warm", Value: value})
				if _, err := retryWrite(ctx, c, "pcache", p, "CacheUpdate", body); err != nil {
					return err
				}
			}
			return nil
		},
		op: func(ctx context.Context, c *neptune.Client, sess *neptune.Session, rng *rand.Rand) error {
			p, key := rng.IntN(appReplParts), fmt.Sprintf("k%d", rng.IntN(1000))
			var (
				method = "CacheLookup"
				body   []byte
			)
			if rng.IntN(10) == 0 {
				method = "CacheUpdate"
				body, _ = json.Marshal(pcache.UpdateRequest{Key: key, Value: value})
			} else {
				body, _ = json.Marshal(pcache.LookupRequest{Key: key})
			}
			_, err := c.Call(ctx, "pcache", p, method, body, neptune.WithSession(sess))
			return err
		},
	}
}
