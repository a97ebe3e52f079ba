package gagesim

import (
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/neptune-cluster/neptune/internal/gage"
)

// sizes draws what one request actually uses. The variants are the
// paper's §4.2.3 experiments.
type sizes struct {
	kind  string  // "const", "cv", "footprint", "trace"
	cv    float64 // "cv": coefficient of variation of the request size
	pDisk float64 // "footprint": probability that a request misses the cache
}

var (
	constSizes = sizes{kind: "const"}
	unitVec    = gage.Vector(gage.DefaultUnit)
)

func cvSizes(cv float64) sizes { return sizes{kind: "cv", cv: cv} }

func (s sizes) String() string {
	switch s.kind {
	case "cv":
		return "size CV " + ftoa(s.cv*100, 1) + "%"
	case "footprint":
		return "disk miss " + ftoa(s.pDisk*100, 0) + "%"
	}
	return s.kind
}

// draw returns one request's usage.
func (s sizes) draw(r *rand.Rand) gage.Vector {
	switch s.kind {
	case "cv":
		// Lognormal with mean 1 and the given CV: a request's size scales
		// all its resources, as a bigger file costs more of each.
		return unitVec.Scale(SizeFactor(r, s.cv))
	case "footprint":
		// A file read served from the page cache costs CPU and network;
		// one that misses also costs 20 ms of disk (Fig 4: the 64 MB
		// footprint is the one where about half the requests miss).
		return footprintRead(r.Float64() < s.pDisk)
	case "trace":
		// SPECweb99-like file sizes (TraceFileSize), 30% of reads missing
		// the cache.
		size := TraceFileSize(r)
		v := gage.Vector{gage.CPU: 0.002 + size/1e6*0.02, gage.Net: size}
		if r.Float64() < 0.3 {
			v[gage.Disk] = 0.008 + size/20e6
		}
		return v
	}
	return unitVec
}

// footprintRead is a Fig 4 read's usage: FootprintCPU and a GRU of
// network, and FootprintMissDisk of disk as well when it misses the page
// cache.
func footprintRead(miss bool) gage.Vector {
	v := gage.Res(FootprintCPU, 0, 2000)
	if miss {
		v[gage.Disk] = FootprintMissDisk.Seconds()
	}
	return v
}

// FootprintCosts are what a Fig 4 read costs in GRU when the page cache
// serves it (its network) and when it misses (its disk): a miss costs
// twice a hit, and reads' bottleneck moves to the disk as the share
// missing passes a half. `neptune bench gage --sections deviation`
// charges its reads the same ratio.
func FootprintCosts() (hit, miss float64) {
	return gage.DefaultUnit.Cost(footprintRead(false)), gage.DefaultUnit.Cost(footprintRead(true))
}

// SizeFactor draws a request's size over the mean: lognormal with mean 1
// and coefficient of variation cv (1 if cv is 0). `neptune bench gage
// --sections deviation` draws its requests' CPU with it.
func SizeFactor(r *rand.Rand, cv float64) float64 {
	if cv == 0 {
		return 1
	}
	sigma2 := math.Log(1 + cv*cv)
	return math.Exp(r.NormFloat64()*math.Sqrt(sigma2) - sigma2/2)
}

// TraceFileSize draws the bytes of one file of the SPECweb99-like mix:
// 35% under 1 KB, 50% 1–10 KB, 15% 10–100 KB (the 1% over 100 KB left out,
// one such file would occupy a simulated node for seconds). `neptune bench
// gage --sections pace` fetches the same mix from real nodes.
func TraceFileSize(r *rand.Rand) float64 {
	switch u := r.Float64(); {
	case u < 0.35:
		return 100 + 900*r.Float64()
	case u < 0.85:
		return 1000 + 9000*r.Float64()
	default:
		return 10000 + 90000*r.Float64()
	}
}

// TraceMeanFileSize is the mean of TraceFileSize, in bytes.
const TraceMeanFileSize = 0.35*550 + 0.5*5500 + 0.15*55000

// meanCost estimates the GRU per request of s's requests, to turn a
// demand in GRPS into a request rate. It is the cost of the mean usage
// (the bottleneck resource over many requests), not the mean of each
// request's cost: a subscriber's usage is accounted per resource (§3.5),
// and served rates are measured the same way.
func (s sizes) meanCost(seed uint64) float64 {
	r := rand.New(rand.NewPCG(seed, 0x5e1f))
	const n = 20000
	var t gage.Vector
	for range n {
		t = t.Add(s.draw(r))
	}
	return gage.DefaultUnit.Cost(t) / n
}

func ftoa(x float64, prec int) string { return strconv.FormatFloat(x, 'f', prec, 64) }

// edge is E[c²]/E[c] of a request's cost c in GRU: the mean cost of the
// request a random instant falls in (a size-biased draw). A scheduler that
// serves whole requests, however exact its accounting, is off in a window
// by about half of that at each of its edges (the request the edge cuts
// counts whole on one side and its pause on the other), so over a window
// of w at r GRPS it deviates by about edge/(2·r·w): the granularity floor
// of the deviation figures.
func (s sizes) edge(seed uint64) float64 {
	r := rand.New(rand.NewPCG(seed, 0xed9e))
	const n = 20000
	var s1, s2 float64
	for range n {
		c := gage.DefaultUnit.Cost(s.draw(r))
		s1, s2 = s1+c, s2+c*c
	}
	return s2 / s1
}
