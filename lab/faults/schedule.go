package faults

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Kind is a nemesis.
type Kind string

const (
	// IsolatePrimary cuts a primary (and one client) off from the rest.
	IsolatePrimary Kind = "isolate-primary"
	// Split cuts a random node (and one client) off: majority/minority.
	Split Kind = "split"
	// Bridge cuts A–C while A–B and B–C stay up (a partial partition).
	Bridge Kind = "bridge"
	// Pause SIGSTOPs a primary for longer than the lease, then SIGCONTs.
	Pause Kind = "pause"
	// Kill SIGKILLs a primary and restarts it after the hold.
	Kill Kind = "kill"
	// TornWAL SIGKILLs a node, damages its write log's tail, restarts it.
	TornWAL Kind = "torn-wal"
	// CutClients cuts every client off from every node for longer than
	// the clients' yellow pages live: their writes in flight meet a
	// cluster they no longer know (issue 28's doubled writes).
	CutClients Kind = "cut-clients"
	// CrashAll SIGKILLs every node at once and restarts them all after
	// the hold: a write in flight may have been logged by none, some or
	// all replicas, and the clients' yellow pages empty meanwhile.
	CrashAll Kind = "crash-all"
	// Lossy impairs every node's egress (SuiteLink: loss, delay, jitter
	// with reordering) for the hold.
	Lossy Kind = "lossy"
)

// Kinds are every nemesis.
var Kinds = []Kind{IsolatePrimary, Split, Bridge, Pause, Kill, TornWAL, CutClients, CrashAll, Lossy}

// SuiteLink is the lossy nemesis's impairment: issue 28's lossy links.
var SuiteLink = Impairment{Loss: 0.10, Delay: 30 * time.Millisecond, Jitter: 20 * time.Millisecond}

// beyondTTL is the shortest hold of CutClients and CrashAll: four times
// the yellow pages' lifetime the suite's clients and nodes run with
// (--announce-ttl 1s), so every client forgets every replica.
const beyondTTL = 4 * time.Second

// Step is one nemesis of a schedule: applied, held, healed, then a rest
// with no fault.
type Step struct {
	Kind Kind
	// Service and Partition name the partition whose primary is targeted.
	Service    string
	Partition  int
	Hold, Rest time.Duration
	// Pick chooses among candidate nodes (a random number).
	Pick int
}

func (s Step) String() string {
	return fmt.Sprintf("%s(%s/%d) hold %v rest %v", s.Kind, s.Service, s.Partition, s.Hold, s.Rest)
}

// Generate is a seeded random schedule of at most steps nemeses whose
// holds and rests add up to at most budget, every kind once before any
// repeats; hold is the typical hold
// (pauses last at least lease + 1 s).
func Generate(seed uint64, steps int, budget, hold, lease time.Duration, parts int) []Step {
	rng := rand.New(rand.NewPCG(seed, 0x6661756c7473))
	var out []Step
	var used time.Duration
	// Every nemesis once first (in a random order), then any.
	perm := rng.Perm(len(Kinds))
	for len(out) < steps {
		kind := Kinds[rng.IntN(len(Kinds))]
		if len(out) < len(perm) {
			kind = Kinds[perm[len(out)]]
		}
		s := Step{Kind: kind, Service: Services[rng.IntN(len(Services))], Partition: rng.IntN(parts), Pick: rng.IntN(1 << 20)}
		s.Hold = hold/2 + time.Duration(rng.Int64N(int64(hold)))
		if s.Kind == Pause {
			s.Hold = max(s.Hold, lease+time.Second)
		}
		if s.Kind == Kill || s.Kind == TornWAL {
			s.Hold = min(s.Hold, 2*time.Second)
		}
		if s.Kind == CutClients || s.Kind == CrashAll {
			s.Hold = max(s.Hold, beyondTTL)
		}
		s.Rest = 2*time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))
		if used+s.Hold+s.Rest > budget {
			break
		}
		used += s.Hold + s.Rest
		out = append(out, s)
	}
	return out
}
