package replication

import (
	"errors"

	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/replica"
	"github.com/neptune-cluster/neptune/internal/service"
)

// Exactly-once writes on real nodes (replica.DedupTable has the rule).
// Each partition loop keeps its replica's table; it is loaded from the
// write log's store at Start and changed only by the loop:
//
//   - propose: a write whose identity the table holds is answered from it
//     at once, without logging it again;
//   - apply: every executed entry advances the table's clock; an entry
//     whose identity the table holds is not executed (its reply is the
//     recorded result), others are executed and recorded;
//   - CHECK: an entry the service reports completed is recorded without a
//     response (its response died with the crash);
//   - the changes are stored in the same batch as the executed marker.
//
// A write logged twice (retried at a new primary that already held the
// first copy, or retried while the first was in flight) therefore runs
// once, and both copies are answered with the first one's result.

// recorded is the reply a repeat of rec's write gets.
func recorded(rec replica.DedupRecord) Result {
	if rec.HasErr {
		return Result{Err: errors.New(rec.Err)}
	}
	return Result{Resp: &service.Response{Body: rec.Body, Version: uint64(rec.LSN)}}
}

// dedupDisabled turns the table off (tests show the list-append workload
// fails without it); never set outside tests.
var dedupDisabled = false

// proposeKnown answers pr from the table if its identity was executed.
func (p *part) proposeKnown(pr proposal) bool {
	if pr.writeID == "" || dedupDisabled {
		return false
	}
	rec, ok := p.dedup.Lookup(pr.writeID)
	if !ok {
		return false
	}
	pr.reply <- recorded(rec)
	return true
}

// skipExecuted reports whether e's identity was already executed here;
// if so it sets the reply of e (when this replica accepted it).
func (p *part) skipExecuted(e replica.Entry) bool {
	p.observeEntry(e)
	if e.WriteID == "" || dedupDisabled {
		return false
	}
	rec, ok := p.dedup.Lookup(e.WriteID)
	if !ok {
		return false
	}
	if e.Origin == replica.ID(p.rt.cfg.Self) && e.ReqID != 0 {
		p.setResult(e.ReqID, recorded(rec))
	}
	return true
}

// recordExecuted remembers what e's execution returned.
func (p *part) recordExecuted(e replica.Entry, res Result) {
	if e.WriteID == "" {
		return
	}
	rec := replica.DedupRecord{WriteID: e.WriteID, LSN: e.LSN, Time: e.Time}
	if res.Err != nil {
		rec.HasErr, rec.Err = true, res.Err.Error()
	} else if res.Resp != nil {
		rec.Body = res.Resp.Body
	}
	p.recordDedup(rec)
}

// recordChecked remembers an entry that CHECK found completed.
func (p *part) recordChecked(e replica.Entry) {
	p.observeEntry(e)
	if e.WriteID != "" {
		p.recordDedup(replica.DedupRecord{WriteID: e.WriteID, LSN: e.LSN, Time: e.Time, Recovered: true})
	}
}

// storeApplied writes the executed marker (0: unchanged) with the table's
// changes, lazily: CHECK covers what a crash loses (see wal.SetAppliedDedup).
func (p *part) storeApplied(last replica.LSN) error {
	put, del, high, changed := p.dedup.Changes()
	switch {
	case changed:
		return p.log.SetAppliedDedup(last, put, del, high, false)
	case last > 0:
		return p.log.SetApplied(last, false)
	}
	return nil
}

func (p *part) setResult(req uint64, res Result) {
	if p.results == nil {
		p.results = map[uint64]Result{}
	}
	p.results[req] = res
}

// outcome turns a write's failure after it was handed to the replica into
// what the caller may conclude: closing or stopping with the write pending
// leaves its outcome open (a retry is safe if the write has an identity).
func outcome(identified bool, err error) error {
	if err == nil || !errors.Is(err, nerr.ErrClosed) && !errors.Is(err, errStopped) {
		return err
	}
	return nerr.UnknownOutcome(identified, err)
}
