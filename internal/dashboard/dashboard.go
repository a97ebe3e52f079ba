// Package dashboard is the live web dashboard every node and gateway
// serves on its metrics listener: server-rendered html/template pages
// (Cluster, Partitions, Traffic, Classes, Aggregation, Subscribers), each
// with a JSON twin under /api/dashboard/, assets from an embed.FS and one
// small hand-written script that re-fetches the open view's content every
// second while the page is visible.
//
// The dashboard does no work while nobody is watching: it starts no
// goroutine and no timer. Everything it shows is computed on the request
// (rates against the gatherings of earlier requests), so an idle node pays
// nothing for it; TestNoWorkWithoutViewers holds that.
//
// It reads its data through the small interfaces in sources.go, which a
// node, a gateway or a test implement.
package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neptune-cluster/neptune/internal/clock"

	"github.com/neptune-cluster/neptune/internal/client"
)

//go:embed assets templates
var files embed.FS

// Views are the dashboard's views, in navigation order.
var Views = []string{"cluster", "partitions", "traffic", "classes", "aggregation", "subscribers"}

// APIPrefix is where the JSON twins are served: APIPrefix + view.
const APIPrefix = "/api/dashboard/"

// Config are the dashboard's sources. Nil sources leave their view
// saying so.
type Config struct {
	// Self names who serves the dashboard: a node id or a gateway's name.
	Self string
	// Role is "node" or "gateway", for the heading.
	Role    string
	Members MemberSource
	// Loads polls each member's load (nil: the loads MemberSource gives).
	Loads LoadSource
	// Departed lists the members that left the yellow pages recently;
	// nil: the dashboard remembers those it saw itself, for Forget.
	Departed   DepartedSource
	Partitions PartitionSource
	// Staleness is a level-3 service's staleness bound, shown with its
	// partitions and judging their replicas; nil or 0: unknown here (a
	// gateway, a service the node does not host).
	Staleness   func(service string) time.Duration
	Subscribers SubscriberSource
	// Gatherer is the process's metrics registry (the one /metrics serves).
	Gatherer prometheus.Gatherer
	// RSS reports other members' resident memory; nil shows only this
	// process's (from Gatherer's process_resident_memory_bytes).
	RSS RSSSource
	// Interval is the yellow pages' refresh interval now (it grows with
	// the cluster: membership.RefreshInterval) and TTL their TTL: a member
	// silent for two intervals is suspect, and once it leaves the yellow
	// pages it shows as dead.
	Interval func() time.Duration
	TTL      time.Duration
	// Refresh is how often an open page re-fetches its view (default 1 s).
	Refresh time.Duration
	// Forget is how long a dead member stays greyed (default 10 min),
	// when the dashboard remembers members itself.
	Forget time.Duration
	// MemberTimeout bounds the poll of one member's load and the fetch of
	// its RSS (default 300 ms): a member that does not answer in time
	// shows late loads and no RSS, and holds up the view no longer.
	MemberTimeout time.Duration
	Clock         clock.Clock
}

// memberFanout is how many members' loads and RSS are fetched at once.
const memberFanout = 16

// Server serves the dashboard. Create it with New.
type Server struct {
	cfg  Config
	tmpl *template.Template
	mux  *http.ServeMux
	rate rater

	mu   sync.Mutex
	seen map[string]seenMember
	// members caches the last member listing (it polls every member) for
	// half a refresh period, so many open pages cost one listing.
	members   []client.Member
	rss       map[string]int64
	membersAt time.Time
	// replicas remembers every replica seen, to show the gone ones.
	replicas map[replicaKey]seenReplica
}

// replicaKey names one replica of one partition.
type replicaKey struct {
	service   string
	partition int
	node      string
}

// seenReplica is a replica's last announced status and when it was seen.
type seenReplica struct {
	r    client.ReplicaInfo
	last time.Time
}

// withGone adds to ps, as role "gone", the replicas seen in earlier
// views that are no longer announced (a killed node's), for Forget, so a
// failover shows which replica left rather than a shorter list.
func (s *Server) withGone(now time.Time, ps []client.PartitionInfo) []client.PartitionInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.replicas == nil {
		s.replicas = map[replicaKey]seenReplica{}
	}
	type partKey struct {
		service   string
		partition int
	}
	byPart := map[partKey][]client.ReplicaInfo{}
	for i := range ps {
		for _, r := range ps[i].Replicas {
			s.replicas[replicaKey{ps[i].Service, ps[i].Partition, r.Node}] = seenReplica{r: r, last: now}
		}
	}
	for k, sr := range s.replicas {
		if now.Sub(sr.last) > s.cfg.Forget {
			delete(s.replicas, k)
			continue
		}
		if sr.last.Equal(now) {
			continue
		}
		g := sr.r
		g.Role, g.Lease, g.LeaseUntil = RoleGone, 0, time.Time{}
		pk := partKey{k.service, k.partition}
		byPart[pk] = append(byPart[pk], g)
	}
	if len(byPart) == 0 {
		return ps
	}
	out := make([]client.PartitionInfo, len(ps))
	for i, p := range ps {
		if gone := byPart[partKey{p.Service, p.Partition}]; len(gone) > 0 {
			p.Replicas = append(slices.Clone(p.Replicas), gone...)
		}
		out[i] = p
	}
	return out
}

// seenMember is the last time a member was in the yellow pages.
type seenMember struct {
	m    client.Member
	last time.Time
}

// departed returns the members no longer in the yellow pages: from the
// DepartedSource if there is one, else from the members this dashboard
// saw itself (live, the current listing), for Forget.
func (s *Server) departed(ctx context.Context, now time.Time, live []client.Member) ([]goneMember, error) {
	if s.cfg.Departed != nil {
		ds, err := s.cfg.Departed.Departed(ctx)
		if err != nil {
			return nil, err
		}
		out := make([]goneMember, 0, len(ds))
		for _, d := range ds {
			out = append(out, goneMember{m: d.Member, last: d.LastSeen, why: d.Why})
		}
		return out, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range live {
		s.seen[m.Node] = seenMember{m: m, last: now.Add(-m.Age)}
	}
	out := make([]goneMember, 0, len(s.seen))
	for n, sm := range s.seen {
		if now.Sub(sm.last) > s.cfg.Forget {
			delete(s.seen, n)
			continue
		}
		out = append(out, goneMember{m: sm.m, last: sm.last})
	}
	return out, nil
}

// New returns the dashboard server for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Refresh <= 0 {
		cfg.Refresh = time.Second
	}
	if cfg.Interval == nil {
		cfg.Interval = func() time.Duration { return time.Second }
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 5 * time.Second
	}
	if cfg.Forget <= 0 {
		cfg.Forget = 10 * time.Minute
	}
	if cfg.MemberTimeout <= 0 {
		cfg.MemberTimeout = 300 * time.Millisecond
	}
	if cfg.Role == "" {
		cfg.Role = "node"
	}
	cfg.Clock = clock.OrReal(cfg.Clock)
	t, err := template.New("").Funcs(template.FuncMap{
		"join": func(ps []int) string { return compactInts(ps) },
		"q":    func(f Filter) template.URL { return template.URL(f.Query()) },
		"pct":  func(n Num) string { return pct(n) },
		"ms":   fmtMs,
		"num":  num,
	}).ParseFS(files, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("dashboard: templates: %w", err)
	}
	s := &Server{cfg: cfg, tmpl: t, mux: http.NewServeMux(), seen: map[string]seenMember{}}
	assets, _ := fs.Sub(files, "assets")
	s.mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(assets)))
	s.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/cluster", http.StatusFound)
	})
	s.mux.HandleFunc("GET "+APIPrefix+"self", s.serveSelf)
	s.mux.HandleFunc("GET "+APIPrefix+"{$}", s.serveIndex)
	for _, v := range Views {
		s.mux.HandleFunc("GET /"+v, s.page(v))
		s.mux.HandleFunc("GET "+APIPrefix+v, s.api(v))
	}
	return s, nil
}

// ServeHTTP serves the pages, their JSON twins and the assets.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Routes are the paths the dashboard serves, for a caller mounting it on a
// mux that also serves other things (/metrics).
func Routes() []string {
	out := []string{"/{$}", "/assets/", APIPrefix}
	for _, v := range Views {
		out = append(out, "/"+v)
	}
	return out
}

// Mount registers the dashboard's routes on mux.
func (s *Server) Mount(mux *http.ServeMux) {
	for _, p := range Routes() {
		mux.Handle(p, s)
	}
}

// View computes one view's data (the JSON twin's value).
func (s *Server) View(ctx context.Context, view string, f Filter) (any, error) {
	now := s.cfg.Clock.Now()
	switch view {
	case "cluster":
		if s.cfg.Members == nil {
			return ClusterView{Self: s.cfg.Self, At: now, Filter: f, Members: []MemberRow{}, Note: "no yellow pages here"}, nil
		}
		ms, rss, err := s.listMembers(ctx, now)
		if err != nil {
			return nil, err
		}
		gone, err := s.departed(ctx, now, ms)
		if err != nil {
			return nil, err
		}
		return buildCluster(s.cfg.Self, now, s.cfg.TTL, s.cfg.Interval(), f, ms, gone, rss), nil
	case "partitions":
		if s.cfg.Partitions == nil {
			return PartitionsView{Self: s.cfg.Self, At: now, Filter: f, Partitions: []PartitionRow{}, Note: "no yellow pages here"}, nil
		}
		ps, err := s.cfg.Partitions.Partitions(ctx)
		if err != nil {
			return nil, err
		}
		if s.cfg.Departed != nil {
			ds, err := s.cfg.Departed.Departed(ctx)
			if err != nil {
				return nil, err
			}
			ps = withDeparted(ps, ds)
		}
		v := buildPartitions(s.cfg.Self, now, f, s.withGone(now, ps), s.cfg.Staleness)
		if len(ps) == 0 {
			v.Note = "no replicated partition is announced"
		}
		return v, nil
	case "traffic", "classes", "aggregation", "subscribers":
		cur, base, err := s.gather(now)
		if err != nil {
			return nil, err
		}
		switch view {
		case "traffic":
			return buildTraffic(s.cfg.Self, now, f, cur, base), nil
		case "classes":
			return buildClasses(s.cfg.Self, now, f, cur, base), nil
		case "aggregation":
			return buildAggregation(s.cfg.Self, now, f, cur, base), nil
		}
		if s.cfg.Subscribers == nil {
			return SubscribersView{Self: s.cfg.Self, At: now, Gateways: []string{}, CapacityGRU: nan, Subscribers: []SubscriberRow{},
				Note: "subscribers are a gateway's: open the dashboard on a gateway's metrics address"}, nil
		}
		subs, err := s.cfg.Subscribers.Subscribers(ctx)
		if err != nil {
			return nil, err
		}
		return buildSubscribers(s.cfg.Self, now, subs, cur, base), nil
	}
	return nil, fmt.Errorf("dashboard: no view %q", view)
}

// gather reads the registry and returns it with the earlier gathering to
// compute rates against.
func (s *Server) gather(now time.Time) (families, *sample, error) {
	if s.cfg.Gatherer == nil {
		return families{}, nil, nil
	}
	fams, err := s.cfg.Gatherer.Gather()
	if err != nil && len(fams) == 0 {
		return nil, nil, fmt.Errorf("dashboard: gather metrics: %w", err)
	}
	cur := index(fams)
	return cur, s.rate.observe(now, cur), nil
}

// listMembers returns the members and their resident memory, from cache
// if fresh.
func (s *Server) listMembers(ctx context.Context, now time.Time) ([]client.Member, map[string]int64, error) {
	s.mu.Lock()
	if s.members != nil && now.Sub(s.membersAt) < s.cfg.Refresh/2 && !now.Before(s.membersAt) {
		ms, rss := s.members, s.rss
		s.mu.Unlock()
		return ms, rss, nil
	}
	s.mu.Unlock()
	ms, err := s.cfg.Members.Members(ctx)
	if err != nil {
		return nil, nil, err
	}
	rss := map[string]int64{}
	if own := s.ownRSS(); own > 0 {
		rss[s.cfg.Self] = own
	}
	s.pollMembers(ctx, ms, rss)
	s.mu.Lock()
	s.members, s.rss, s.membersAt = ms, rss, now
	s.mu.Unlock()
	return ms, rss, nil
}

// pollMembers fills in the members' loads (Loads) and resident memory
// (RSS), memberFanout members at a time, each within MemberTimeout: a
// member that never answers costs the view MemberTimeout, not more, and
// shows its loads late.
func (s *Server) pollMembers(ctx context.Context, ms []client.Member, rss map[string]int64) {
	if s.cfg.Loads == nil && s.cfg.RSS == nil {
		return
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, memberFanout)
	for i := range ms {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			m := &ms[i]
			mctx, cancel := context.WithTimeout(ctx, s.cfg.MemberTimeout)
			defer cancel()
			if s.cfg.Loads != nil {
				// The poll writes into Load maps of the dashboard's own,
				// not the source's listing.
				hosted := make([]client.HostedService, len(m.Services))
				for j, h := range m.Services {
					h.Load = make(map[int]int, len(h.Partitions))
					for _, p := range h.Partitions {
						h.Load[p] = -1
					}
					hosted[j] = h
				}
				m.Services = hosted
				s.cfg.Loads.PollLoad(mctx, *m)
			}
			if s.cfg.RSS != nil && m.Node != s.cfg.Self {
				if v := s.cfg.RSS.RSS(mctx, *m); v > 0 {
					mu.Lock()
					rss[m.Node] = v
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
}

func (s *Server) ownRSS() int64 {
	if s.cfg.Gatherer == nil {
		return 0
	}
	fams, err := s.cfg.Gatherer.Gather()
	if err != nil && len(fams) == 0 {
		return 0
	}
	for _, f := range fams {
		if f.GetName() == mRSS && len(f.GetMetric()) == 1 {
			return int64(f.GetMetric()[0].GetGauge().GetValue())
		}
	}
	return 0
}

// SelfStatus is /api/dashboard/self: who serves this dashboard and its
// resident memory (what other members' Cluster views show).
type SelfStatus struct {
	Self     string    `json:"self"`
	Role     string    `json:"role"`
	RSSBytes int64     `json:"rss_bytes"`
	At       time.Time `json:"at"`
}

func (s *Server) serveSelf(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, SelfStatus{Self: s.cfg.Self, Role: s.cfg.Role, RSSBytes: s.ownRSS(), At: s.cfg.Clock.Now()})
}

func (s *Server) api(view string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, err := s.View(r.Context(), view, parseFilter(r.URL.Query()))
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		writeJSON(w, v)
	}
}

// Index is the answer at APIPrefix itself: where each view's JSON twin
// is, and the query parameters that filter them.
type Index struct {
	Self    string            `json:"self"`
	Role    string            `json:"role"`
	Views   map[string]string `json:"views"`   // view name: its path
	Filters []string          `json:"filters"` // query parameters every view takes
}

// serveIndex lists the JSON twins, so /api/dashboard/ answers what is
// under it.
func (s *Server) serveIndex(w http.ResponseWriter, _ *http.Request) {
	idx := Index{Self: s.cfg.Self, Role: s.cfg.Role, Views: map[string]string{"self": APIPrefix + "self"}, Filters: []string{"service", "partition", "node"}}
	for _, v := range Views {
		idx.Views[v] = APIPrefix + v
	}
	writeJSON(w, idx)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	_ = enc.Encode(v)
}

// pageData is what the page templates receive.
type pageData struct {
	Self, Role string
	View       string
	Views      []string
	Filter     Filter
	RefreshMs  int64
	At         string
	Data       any
	Err        string
	API        string
}

func (s *Server) page(view string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f := parseFilter(r.URL.Query())
		d := pageData{Self: s.cfg.Self, Role: s.cfg.Role, View: view, Views: Views, Filter: f, RefreshMs: s.cfg.Refresh.Milliseconds(),
			At: s.cfg.Clock.Now().Format("15:04:05"), API: APIPrefix + view + f.Query()}
		v, err := s.View(r.Context(), view, f)
		if err != nil {
			d.Err = err.Error()
		}
		d.Data = v
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		name := "page"
		if r.URL.Query().Get("fragment") != "" {
			name = "content"
		}
		if err := s.tmpl.ExecuteTemplate(w, name, d); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	}
}

// compactInts writes sorted ints as ranges: 0-3,7.
func compactInts(ps []int) string {
	ps = slices.Clone(ps)
	slices.Sort(ps)
	var b strings.Builder
	for i := 0; i < len(ps); {
		j := i
		for j+1 < len(ps) && ps[j+1] == ps[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", ps[i], ps[j])
		} else {
			fmt.Fprintf(&b, "%d", ps[i])
		}
		i = j + 1
	}
	return b.String()
}

func pct(n Num) string {
	if n != n {
		return "—"
	}
	return fmt.Sprintf("%.0f%%", float64(n)*100)
}
