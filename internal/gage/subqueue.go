package gage

import "fmt"

// subscriberIndex maps a subscriber's name to its position in a
// scheduler's per-subscriber state.
type subscriberIndex map[string]int

// find returns name's position, or ErrUnknownSubscriber.
func (x subscriberIndex) find(name string) (int, error) {
	i, ok := x[name]
	if !ok {
		return 0, fmt.Errorf("%w %q", ErrUnknownSubscriber, name)
	}
	return i, nil
}

// subQueue is what the credit and tag schedulers both keep per subscriber:
// its FIFO, its share of reservation and limit at this gateway, the cost
// predictor and the predicted usage of its requests still out.
type subQueue struct {
	sub   Subscriber
	share float64
	q     ring
	pred  predictor
	out   inflight
}

func newSubQueue(s Subscriber, opt Options) subQueue {
	return subQueue{sub: s, share: 1, pred: predictor{alpha: opt.Alpha, period: opt.AccountingCycle, m: opt.Initial}}
}

func (q *subQueue) reservation() float64 { return q.sub.Reservation * q.share }
func (q *subQueue) limit() float64       { return q.sub.Limit * q.share }
func (q *subQueue) weight() float64      { return max(q.reservation(), minWeight) }

// state is the queue as Scheduler.Queues reports it.
func (q *subQueue) state(u Unit) QueueState {
	return QueueState{Subscriber: q.sub.Name, Len: q.q.len(), Predicted: u.Cost(q.pred.predict()), Outstanding: q.out.n}
}
