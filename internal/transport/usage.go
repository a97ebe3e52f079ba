package transport

import (
	"context"
	"net/url"
	"strconv"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/neptune-cluster/neptune/internal/service"
)

// Gage's per-request accounting rides on gRPC metadata, with no change to
// the messages: the caller names the subscriber a request is charged to in
// the request metadata, and the node answers with what the request used
// (and its own last accounting cycle) in the response trailer. A request
// without a subscriber is not measured and gets no trailer.
const (
	// MetaSubscriber is the request metadata key naming the subscriber.
	MetaSubscriber = "neptune-subscriber"
	// MetaUsage is the response trailer key carrying EncodeUsage's text.
	MetaUsage = "neptune-usage"
)

// WithSubscriber returns ctx whose outgoing calls name subscriber sub.
func WithSubscriber(ctx context.Context, sub string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, MetaSubscriber, sub)
}

// SubscriberOf returns the subscriber an incoming call names, or "".
func SubscriberOf(ctx context.Context) string {
	if v := metadata.ValueFromIncomingContext(ctx, MetaSubscriber); len(v) > 0 {
		return v[0]
	}
	return ""
}

// EncodeUsage is the trailer text of u: a URL-encoded form, so that node
// names need no care and unknown keys from a newer node are ignored.
func EncodeUsage(u service.CallUsage) string {
	v := url.Values{}
	i := func(k string, x int64) { v.Set(k, strconv.FormatInt(x, 10)) }
	f := func(k string, x float64) { v.Set(k, strconv.FormatFloat(x, 'g', 6, 64)) }
	v.Set("node", u.Node)
	i("cpu", int64(u.CPU))
	i("dr", u.DiskRead)
	i("dw", u.DiskWrite)
	i("in", u.NetIn)
	i("out", u.NetOut)
	if u.Load.Interval > 0 {
		i("ival", int64(u.Load.Interval))
		i("lcpu", int64(u.Load.Used.CPU))
		i("ldr", u.Load.Used.DiskRead)
		i("ldw", u.Load.Used.DiskWrite)
		i("lin", u.Load.Used.NetIn)
		i("lout", u.Load.Used.NetOut)
		f("cbusy", u.Load.CPUBusy)
		f("dbusy", u.Load.DiskBusy)
		i("cores", int64(u.Load.Cores))
	}
	return v.Encode()
}

// DecodeUsage parses EncodeUsage's text; ok is false if it is malformed
// or names no node.
func DecodeUsage(s string) (u service.CallUsage, ok bool) {
	v, err := url.ParseQuery(s)
	if err != nil || v.Get("node") == "" {
		return u, false
	}
	bad := false
	i := func(k string) int64 {
		if v.Get(k) == "" {
			return 0
		}
		x, err := strconv.ParseInt(v.Get(k), 10, 64)
		if err != nil || x < 0 {
			bad = true
		}
		return x
	}
	f := func(k string) float64 {
		if v.Get(k) == "" {
			return 0
		}
		x, err := strconv.ParseFloat(v.Get(k), 64)
		if err != nil || x < 0 || x != x {
			bad = true
		}
		return x
	}
	u.Node = v.Get("node")
	u.CPU = time.Duration(i("cpu"))
	u.DiskRead, u.DiskWrite, u.NetIn, u.NetOut = i("dr"), i("dw"), i("in"), i("out")
	u.Load.Interval = time.Duration(i("ival"))
	u.Load.Used = service.Usage{CPU: time.Duration(i("lcpu")), DiskRead: i("ldr"), DiskWrite: i("ldw"), NetIn: i("lin"), NetOut: i("lout")}
	u.Load.CPUBusy, u.Load.DiskBusy = min(f("cbusy"), 1), min(f("dbusy"), 1)
	u.Load.Cores = int(i("cores"))
	if bad {
		return service.CallUsage{}, false
	}
	return u, true
}

// UsageFromTrailer decodes the usage a call's trailer carries.
func UsageFromTrailer(md metadata.MD) (service.CallUsage, bool) {
	if v := md.Get(MetaUsage); len(v) > 0 {
		return DecodeUsage(v[0])
	}
	return service.CallUsage{}, false
}
