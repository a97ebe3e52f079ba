package dashboard

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Screen is what `neptune top` shows: four views' JSON twins.
type Screen struct {
	Cluster     ClusterView
	Partitions  PartitionsView
	Traffic     TrafficView
	Aggregation AggregationView
}

// WriteText renders the screen for a terminal, each table cut to at most
// rows lines (rows <= 0: no limit) so a refreshing view stays on one
// screen; a cut table says how many lines it left out.
func WriteText(w io.Writer, s Screen, rows int) error {
	cut := func(n int) (int, int) {
		if rows <= 0 || n <= rows {
			return n, 0
		}
		return rows, n - rows
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	c := s.Cluster
	fmt.Fprintf(tw, "CLUSTER from %s at %s: %d alive, %d suspect, %d dead\n", c.Self, c.At.Format("15:04:05"), c.Alive, c.Suspect, c.Dead)
	fmt.Fprintln(tw, "NODE\tSTATE\tAGE\tRSS\tSERVICES (partitions: load)")
	n, left := cut(len(c.Members))
	for _, m := range c.Members[:n] {
		var ss []string
		for _, sv := range m.Services {
			ss = append(ss, fmt.Sprintf("%s %s: %d", sv.Name, compactInts(sv.Partitions), sv.Load))
		}
		self := ""
		if m.Self {
			self = " *"
		}
		state := strings.ToUpper(m.State)
		if m.Why != "" {
			state += " (" + m.Why + ")"
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\n", m.Node, self, state, m.Age(), m.RSS(), strings.Join(ss, "  "))
	}
	more(tw, left)
	p := s.Partitions
	fmt.Fprintf(tw, "\nPARTITIONS: %d, %d without primary, %d stale replicas\n", p.Total, p.NoPrimary, p.Stale)
	fmt.Fprintln(tw, "SERVICE\tPART\tPRIMARY\tEPOCH\tLEASE\tREPLICAS (version -lag, ! stale)")
	n, left = cut(len(p.Partitions))
	for _, r := range p.Partitions[:n] {
		var rs []string
		for _, x := range r.Replicas {
			t := fmt.Sprintf("%s v%d", x.Node, x.Version)
			if x.Lag > 0 {
				t += fmt.Sprintf(" -%d", x.Lag)
			}
			if x.Stale {
				t += " !"
			}
			if x.Claim != "" {
				t += " " + x.Claim
			}
			if c := x.ContactText(); c != "" {
				t += " " + c
			}
			rs = append(rs, t)
		}
		prim := r.Primary
		if prim == "" {
			prim = "NONE"
		} else if r.PrimaryStale != "" {
			prim += " (" + r.PrimaryStale + ")"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\n", r.Service, r.Partition, prim, r.Epoch, r.Lease(), strings.Join(rs, ", "))
	}
	more(tw, left)
	t := s.Traffic
	window := "since start"
	if t.WindowS > 0 {
		window = fmt.Sprintf("last %.1f s", t.WindowS)
	}
	fmt.Fprintf(tw, "\nTRAFFIC served here (%s)\n", window)
	fmt.Fprintln(tw, "SERVICE\tMETHOD\tCALLS/S\tERRORS/S\tP50 MS\tP99 MS")
	n, left = cut(len(t.Served))
	for _, m := range t.Served[:n] {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.Service, m.Method, m.Rate, m.Errors, m.P50Ms, m.P99Ms)
	}
	more(tw, left)
	for _, side := range []struct {
		title string
		rows  []AggregationRow
	}{{"made here", s.Aggregation.Called}, {"rooted here", s.Aggregation.Rooted}} {
		if len(side.rows) == 0 {
			continue
		}
		fmt.Fprintf(tw, "\nAGGREGATION calls %s (%s)\n", side.title, window)
		fmt.Fprintln(tw, "SERVICE\tCALLS/S\tCALLS\tPARTIAL\tFAILED\tCOVERAGE\tLOST\tHEDGES")
		n, left = cut(len(side.rows))
		for _, r := range side.rows[:n] {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Service, r.CallRate, r.Calls, r.Partial, r.Failed, pct(r.Coverage), r.Lost, r.Hedges)
		}
		more(tw, left)
	}
	return tw.Flush()
}

func more(w io.Writer, left int) {
	if left > 0 {
		fmt.Fprintf(w, "… %d more (narrow with --service/--partition/--node)\n", left)
	}
}
