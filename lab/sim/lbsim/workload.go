package lbsim

import (
	"fmt"
	"iter"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/neptune-cluster/neptune/lab/sim"
)

// Dist samples positive durations with a known mean.
type Dist struct {
	// Name is a short label for tables.
	Name string
	// Mean is the distribution's mean.
	Mean time.Duration
	// CV2 is the squared coefficient of variation (variance / mean²).
	CV2    float64
	sample func(rng *rand.Rand) float64 // in units of Mean
}

// Sample draws one value.
func (d Dist) Sample(rng *rand.Rand) time.Duration {
	return time.Duration(d.sample(rng) * float64(d.Mean))
}

// Scaled returns d with its mean set to mean and its shape unchanged.
func (d Dist) Scaled(mean time.Duration) Dist {
	d.Mean = mean
	return d
}

// Exp is the exponential distribution (CV² = 1).
func Exp(mean time.Duration) Dist {
	return Dist{Name: "exp", Mean: mean, CV2: 1, sample: func(rng *rand.Rand) float64 { return rng.ExpFloat64() }}
}

// Det is the constant mean (CV² = 0).
func Det(mean time.Duration) Dist {
	return Dist{Name: "det", Mean: mean, sample: func(*rand.Rand) float64 { return 1 }}
}

// HyperExp is a two-phase hyperexponential with balanced means and the given
// CV² (>= 1): the usual model of high-variance service times.
func HyperExp(mean time.Duration, cv2 float64) Dist {
	p := 0.5 * (1 + math.Sqrt((cv2-1)/(cv2+1)))
	// Phase i is chosen with probability p_i and has mean 1/(2 p_i), so
	// each phase carries half of the mean.
	return Dist{Name: fmt.Sprintf("h2(cv²=%g)", cv2), Mean: mean, CV2: cv2, sample: func(rng *rand.Rand) float64 {
		if rng.Float64() < p {
			return rng.ExpFloat64() / (2 * p)
		}
		return rng.ExpFloat64() / (2 * (1 - p))
	}}
}

// LogNormal has the given mean and standard deviation. It stands in for the
// Teoma traces of Table 3.1, of which only the first two moments are
// published.
func LogNormal(mean, stddev time.Duration) Dist {
	cv := float64(stddev) / float64(mean)
	s2 := math.Log1p(cv * cv)
	mu, s := -s2/2, math.Sqrt(s2) // unit mean
	return Dist{Name: "lognormal", Mean: mean, CV2: cv * cv, sample: func(rng *rand.Rand) float64 {
		return math.Exp(mu + s*rng.NormFloat64())
	}}
}

// Workload is a service-time distribution and the shape of the arrival
// process; the arrival rate is set by the target load.
type Workload struct {
	Name    string
	Service Dist
	// Interarrival's mean is ignored: the simulator scales it to the load.
	Interarrival Dist
}

// Scaled returns w with every service time multiplied by f (and so, at a
// given load, every interarrival time too).
func (w Workload) Scaled(f float64) Workload {
	w.Service = w.Service.Scaled(time.Duration(float64(w.Service.Mean) * f))
	return w
}

// Arrival is one request of a trace.
type Arrival struct {
	// At is when it reaches its client, from the start of the trace.
	At time.Duration
	// Service is the server time it takes.
	Service time.Duration
	// Client is the index of the client that sends it.
	Client int
}

// Trace is the endless open-loop arrival trace of workload w that keeps
// busy servers busy (a load in units of servers), its requests assigned to
// clients uniformly. It depends only on its arguments, so every policy run
// with the same seed, simulated or replayed on real nodes (bench lb), sees
// the same requests.
func Trace(w Workload, busy float64, clients int, seed uint64) iter.Seq[Arrival] {
	return func(yield func(Arrival) bool) {
		rng := sim.Rand(seed, streamTrace)
		inter := w.Interarrival.Scaled(time.Duration(float64(w.Service.Mean) / busy))
		for t := time.Duration(0); ; {
			t += inter.Sample(rng)
			if !yield(Arrival{At: t, Service: w.Service.Sample(rng), Client: rng.IntN(clients)}) {
				return
			}
		}
	}
}

// The workloads of §3.1.1. Poisson/Exp uses the 50 ms mean service time of
// Figs 3.2–3.3; the trace-like ones use Table 3.1's moments for both the
// service times and the (rescaled) interarrival times.
var (
	PoissonExp = Workload{Name: "exp", Service: Exp(50 * time.Millisecond), Interarrival: Exp(time.Second)}
	FineGrain  = Workload{Name: "fine", Service: LogNormal(22200*time.Microsecond, 10*time.Millisecond),
		Interarrival: LogNormal(436700*time.Microsecond, 349400*time.Microsecond)}
	MediumGrain = Workload{Name: "medium", Service: LogNormal(208900*time.Microsecond, 62900*time.Microsecond),
		Interarrival: LogNormal(341500*time.Microsecond, 321100*time.Microsecond)}
	Deterministic = Workload{Name: "det", Service: Det(50 * time.Millisecond), Interarrival: Exp(time.Second)}
	HighVariance  = Workload{Name: "hv", Service: HyperExp(50*time.Millisecond, 4), Interarrival: Exp(time.Second)}
)

// Workloads lists every named workload.
var Workloads = []Workload{PoissonExp, FineGrain, MediumGrain, Deterministic, HighVariance}

// WorkloadByName finds a workload in Workloads.
func WorkloadByName(name string) (Workload, error) {
	i := slices.IndexFunc(Workloads, func(w Workload) bool { return w.Name == name })
	if i < 0 {
		names := make([]string, len(Workloads))
		for j, w := range Workloads {
			names[j] = w.Name
		}
		return Workload{}, fmt.Errorf("lbsim: unknown workload %q (want one of %v)", name, names)
	}
	return Workloads[i], nil
}
