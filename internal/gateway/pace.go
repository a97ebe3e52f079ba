package gateway

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/gage"
)

// pacer writes response bodies through a gage.Shaper (pace_responses),
// which it guards: the handlers of concurrent requests share it, so a
// subscriber's concurrent responses share its pace.
type pacer struct {
	clk clock.Clock
	// share is this gateway's part of a subscriber's reservation (the
	// gateways' split), read as each response starts.
	share  func(sub string) float64
	mu     sync.Mutex
	shaper *gage.Shaper
}

// newPacer is the pacer of cfg (nil without pace_responses); share tells
// it this gateway's part of a subscriber's reservation.
func newPacer(cfg Config, clk clock.Clock, share func(sub string) float64) (*pacer, error) {
	if !cfg.PaceResponses {
		return nil, nil
	}
	s, err := gage.NewShaper(cfg.Gage(), gage.ShaperOptions{Headroom: cfg.PaceHeadroom, MaxDelay: time.Duration(cfg.PaceMaxDelay)})
	if err != nil {
		return nil, err
	}
	return &pacer{clk: clk, share: share, shaper: s}, nil
}

// write sends body to w, in the chunks the shaper cuts, each when it is
// due, flushing each so that it leaves then; without pacing (p nil) at
// once. It returns how
// long the chunks were held in all. It stops early, with the context's
// error, if ctx ends (the client went away).
func (p *pacer) write(ctx context.Context, w http.ResponseWriter, sub string, body []byte) (held time.Duration, err error) {
	if p == nil {
		_, err := w.Write(body)
		return 0, err
	}
	rc := http.NewResponseController(w)
	share := p.share(sub)
	p.mu.Lock()
	p.shaper.SetShare(sub, share)
	paced := p.shaper.Response(p.clk.Now(), sub, len(body))
	p.mu.Unlock()
	for {
		p.mu.Lock()
		due, n := paced.Next(p.clk.Now())
		p.mu.Unlock()
		if n == 0 {
			return held, nil
		}
		if d := due.Sub(p.clk.Now()); d > 0 {
			held += d
			t := p.clk.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return held, ctx.Err()
			case <-t.Chan():
			}
		}
		if _, err := w.Write(body[:n]); err != nil {
			return held, err
		}
		_ = rc.Flush() // recorders in tests cannot flush, which is harmless
		body = body[n:]
	}
}
