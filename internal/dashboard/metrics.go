package dashboard

import (
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// families is one gathering of a registry, by metric name.
type families map[string]*dto.MetricFamily

func index(fams []*dto.MetricFamily) families {
	out := make(families, len(fams))
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// series is one labelled series of a family.
type series struct {
	labels map[string]string
	value  float64 // counter, gauge or untyped value; histogram count
	hist   *dto.Histogram
}

func (s series) key(names ...string) string {
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = s.labels[n]
	}
	return strings.Join(parts, "\x00")
}

// all returns every series of the family name (none if absent).
func (f families) all(name string) []series {
	fam := f[name]
	if fam == nil {
		return nil
	}
	out := make([]series, 0, len(fam.GetMetric()))
	for _, m := range fam.GetMetric() {
		s := series{labels: map[string]string{}}
		for _, l := range m.GetLabel() {
			s.labels[l.GetName()] = l.GetValue()
		}
		switch {
		case m.Counter != nil:
			s.value = m.GetCounter().GetValue()
		case m.Gauge != nil:
			s.value = m.GetGauge().GetValue()
		case m.Untyped != nil:
			s.value = m.GetUntyped().GetValue()
		case m.Histogram != nil:
			s.hist = m.GetHistogram()
			s.value = float64(s.hist.GetSampleCount())
		case m.Summary != nil:
			s.value = float64(m.GetSummary().GetSampleCount())
		}
		out = append(out, s)
	}
	return out
}

// byKey maps the family's series by their values of the label names.
func (f families) byKey(name string, labels ...string) map[string]series {
	out := map[string]series{}
	for _, s := range f.all(name) {
		out[s.key(labels...)] = s
	}
	return out
}

// sample is one gathering with its time.
type sample struct {
	at   time.Time
	fams families
}

// rater keeps a few recent gatherings so that a view can show rates
// (calls/s) and recent percentiles without any background sampling: the
// samples are taken by the requests themselves, so nobody watching means
// no work at all. A view polled every second sees rates over about the
// last one to two seconds; the first request after a pause shows totals.
type rater struct {
	mu      sync.Mutex
	samples []sample // ascending by time
}

const (
	minWindow  = time.Second      // a rate covers at least this much
	maxWindow  = 30 * time.Second // and samples older than this are dropped
	maxSamples = 8
)

// observe records the gathering at now and returns the sample to compute
// rates against (nil if none is old enough yet).
func (r *rater) observe(now time.Time, cur families) *sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	keep := r.samples[:0]
	for _, s := range r.samples {
		if now.Sub(s.at) <= maxWindow && !s.at.After(now) {
			keep = append(keep, s)
		}
	}
	r.samples = keep
	var base *sample
	for i := len(r.samples) - 1; i >= 0; i-- {
		if now.Sub(r.samples[i].at) >= minWindow {
			s := r.samples[i]
			base = &s
			break
		}
	}
	if n := len(r.samples); n == 0 || now.Sub(r.samples[n-1].at) >= minWindow/2 {
		r.samples = append(r.samples, sample{at: now, fams: cur})
		if len(r.samples) > maxSamples {
			r.samples = r.samples[len(r.samples)-maxSamples:]
		}
	}
	return base
}

// delta is cur minus the same series in base (cur if base lacks it or the
// counter was reset).
func delta(cur float64, base *series) float64 {
	if base == nil || base.value > cur {
		return cur
	}
	return cur - base.value
}

// quantile estimates the q-quantile of a histogram's observations,
// interpolating linearly within the bucket as Prometheus's
// histogram_quantile does; with base, of the observations since base.
// NaN if there are none.
func quantile(q float64, h, base *dto.Histogram) float64 {
	if h == nil {
		return math.NaN()
	}
	bs := h.GetBucket()
	cum := make([]float64, len(bs))
	for i, b := range bs {
		cum[i] = float64(b.GetCumulativeCount())
	}
	total := float64(h.GetSampleCount())
	if base != nil && len(base.GetBucket()) == len(bs) && base.GetSampleCount() < h.GetSampleCount() {
		for i, b := range base.GetBucket() {
			cum[i] -= float64(b.GetCumulativeCount())
		}
		total -= float64(base.GetSampleCount())
	}
	if total <= 0 {
		return math.NaN()
	}
	rank := q * total
	i := sort.Search(len(cum), func(i int) bool { return cum[i] >= rank })
	if i == len(cum) {
		if len(bs) == 0 {
			return math.NaN()
		}
		return bs[len(bs)-1].GetUpperBound() // beyond the last finite bucket
	}
	lo, loCount := 0.0, 0.0
	if i > 0 {
		lo, loCount = bs[i-1].GetUpperBound(), cum[i-1]
	}
	hi := bs[i].GetUpperBound()
	if math.IsInf(hi, 1) {
		return lo
	}
	if cum[i] == loCount {
		return hi
	}
	return lo + (hi-lo)*(rank-loCount)/(cum[i]-loCount)
}
