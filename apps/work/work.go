// Package work is an emulated-work service for load-balancing experiments:
// its "work" method sleeps for the duration named in the request, so a node
// hosting it with one worker behaves as one FIFO processing unit whose
// service times the caller chooses, and sixteen of them fit on two cores.
package work

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/neptune-cluster/neptune"
)

// ErrBadRequest is returned for a malformed body.
var ErrBadRequest = errors.New("work: malformed request")

// Workers is the pool size that makes a node one FIFO processing unit. The
// node's configuration sets it (services[].workers: 1); Service declares it
// for programs that register the service themselves.
const Workers = 1

// Service returns a fresh work service. Methods:
//   - work (read): body is the service time, Encode'd; sleeps it times the
//     slowdown and answers "pid=<process id>" so callers can tell which
//     node served them.
//   - slowdown (write): body is a decimal factor (e.g. "10"); every later
//     work call on this node sleeps that many times longer. It answers with
//     the previous factor. A fault-injection knob for experiments: call it
//     on one node directly, not through the balancer.
func Service() neptune.Service {
	s := &server{pid: []byte("pid=" + strconv.Itoa(os.Getpid()))}
	s.slowdown.Store(math.Float64bits(1))
	return neptune.Service{
		Name:    "work",
		Workers: Workers,
		Methods: []neptune.Method{
			{Name: "work", Mode: neptune.Read, Handler: s.work},
			{Name: "slowdown", Mode: neptune.Write, Handler: s.setSlowdown},
		},
	}
}

// Encode is the body of a work call that takes d.
func Encode(d time.Duration) []byte { return binary.AppendUvarint(nil, uint64(max(d, 0))) }

// PID parses a work response body into the serving node's process id.
func PID(body []byte) (int, error) {
	s, ok := bytes.CutPrefix(body, []byte("pid="))
	if !ok {
		return 0, fmt.Errorf("%w: response %q does not name a pid", ErrBadRequest, body)
	}
	return strconv.Atoi(string(s))
}

type server struct {
	pid      []byte
	slowdown atomic.Uint64 // float64 bits
}

func (s *server) work(ctx context.Context, r *neptune.Request) (*neptune.Response, error) {
	ns, n := binary.Uvarint(r.Body)
	if n <= 0 || n != len(r.Body) {
		return nil, fmt.Errorf("%w: body must be a service time from work.Encode", ErrBadRequest)
	}
	d := time.Duration(float64(ns) * math.Float64frombits(s.slowdown.Load()))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &neptune.Response{Body: s.pid}, nil
}

func (s *server) setSlowdown(_ context.Context, r *neptune.Request) (*neptune.Response, error) {
	f, err := strconv.ParseFloat(string(r.Body), 64)
	if err != nil || f <= 0 || math.IsInf(f, 0) {
		return nil, fmt.Errorf("%w: slowdown %q is not a positive factor", ErrBadRequest, r.Body)
	}
	old := math.Float64frombits(s.slowdown.Swap(math.Float64bits(f)))
	return &neptune.Response{Body: strconv.AppendFloat(nil, old, 'g', -1, 64)}, nil
}
