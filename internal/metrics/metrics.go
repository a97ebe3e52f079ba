// Package metrics registers Neptune's Prometheus collectors into a
// registry the embedding program injects: registration errors name the
// metric instead of panicking, and a registry that cannot be scraped gets
// a private twin that /metrics serves.
package metrics

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neptune-cluster/neptune/internal/version"
)

// Metric is a collector and the name an error reports it by.
type Metric struct {
	Name      string
	Collector prometheus.Collector
}

// Register registers every metric into reg, or none: on the first error
// it unregisters those it registered and returns an error naming the
// metric. A metric already in reg (say two nodes share one registry)
// gives prometheus.AlreadyRegisteredError, wrapped.
func Register(reg prometheus.Registerer, ms ...Metric) error {
	for i, m := range ms {
		if err := reg.Register(m.Collector); err != nil {
			for _, done := range ms[:i] {
				reg.Unregister(done.Collector)
			}
			hint := ""
			if errors.As(err, new(prometheus.AlreadyRegisteredError)) {
				hint = " (is another node or client registered here? give each its own registry, or wrap a shared one with prometheus.WrapRegistererWith and a distinct label)"
			}
			return fmt.Errorf("neptune: register metric %s: %w%s", m.Name, err, hint)
		}
	}
	return nil
}

// Registries is where a component's metrics go: Registerer receives them
// and Gatherer is what /metrics serves. When the injected Registerer is
// not a Gatherer, a private registry receives every metric too and is
// served.
type Registries struct {
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
}

// For returns the registries of an injected Registerer; nil gets a
// private registry.
func For(reg prometheus.Registerer) Registries {
	if reg == nil {
		r := prometheus.NewRegistry()
		return Registries{Registerer: r, Gatherer: r}
	}
	if g, ok := reg.(prometheus.Gatherer); ok {
		return Registries{Registerer: reg, Gatherer: g}
	}
	private := prometheus.NewRegistry()
	return Registries{Registerer: tee{reg, private}, Gatherer: private}
}

// tee registers into the injected registerer and the private registry.
type tee struct{ a, b prometheus.Registerer }

func (t tee) Register(c prometheus.Collector) error {
	if err := t.a.Register(c); err != nil {
		return err
	}
	if err := t.b.Register(c); err != nil {
		t.a.Unregister(c)
		return err
	}
	return nil
}

func (t tee) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := t.Register(c); err != nil {
			panic(err)
		}
	}
}

func (t tee) Unregister(c prometheus.Collector) bool {
	a := t.a.Unregister(c)
	b := t.b.Unregister(c)
	return a || b
}

// BuildInfo is neptune_build_info: always 1, labelled with what was
// built, so dashboards can join it and alerts can spot mixed versions. A
// process registers it once (RegisterShared), whatever it runs.
func BuildInfo() prometheus.Collector {
	commit := version.Commit
	if commit == "" {
		commit = "unknown"
	}
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "neptune_build_info",
		Help:        "Always 1; its labels are the release and source revision this process runs and the Go version that built it.",
		ConstLabels: prometheus.Labels{"version": version.Release, "revision": commit, "goversion": runtime.Version()},
	}, func() float64 { return 1 })
}

// RegisterShared registers c unless reg has an equal collector already
// (the Go, process and build-info collectors, which every component of a
// process would register): registered reports whether this call did, so
// only its caller unregisters it.
func RegisterShared(reg prometheus.Registerer, c prometheus.Collector) (registered bool, err error) {
	err = reg.Register(c)
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, new(prometheus.AlreadyRegisteredError)):
		return false, nil
	}
	return false, err
}
