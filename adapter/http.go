package adapter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/propagation"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/internal/obs"
)

// HTTPConfig hosts an HTTP service (YAML key services[i].http).
type HTTPConfig struct {
	// BaseURL is where the program listens, e.g. http://127.0.0.1:8080.
	BaseURL string `yaml:"base_url"`
	// CheckRoute, if set, answers CHECK: Neptune sends GET with the
	// Neptune-Partition and Neptune-LSN headers and expects 200 with body
	// "true" or "false" (whether that write was applied).
	CheckRoute string `yaml:"check_route"`
	// Timeout bounds one call when the caller set no earlier deadline
	// (default 30s).
	Timeout time.Duration `yaml:"timeout"`
	// MaxRequest caps a request body sent to the program, MaxResponse
	// the bytes read from its answer (default DefaultMaxBody each, the
	// node's default MaxMessageBytes): larger ones fail with
	// neptune.ErrTooLarge.
	MaxRequest  int64 `yaml:"max_request"`
	MaxResponse int64 `yaml:"max_response"`
	// Methods map Neptune methods to routes.
	Methods []MethodConfig `yaml:"methods"`
	// Aggregate declares aggregation operators the program serves, each
	// at a route the node POSTs to (aggregate.go).
	Aggregate *AggregateConfig `yaml:"aggregate"`
}

// Validate checks the config; messages name the YAML field under "http".
func (c HTTPConfig) Validate() error {
	u, err := url.Parse(c.BaseURL)
	switch {
	case c.BaseURL == "":
		return errors.New("http.base_url is required, e.g. http://127.0.0.1:8080")
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("http.base_url %q is not an http:// or https:// URL with a host", c.BaseURL)
	case c.CheckRoute != "" && !strings.HasPrefix(c.CheckRoute, "/"):
		return fmt.Errorf("http.check_route %q must start with /", c.CheckRoute)
	case c.Timeout < 0:
		return fmt.Errorf("http.timeout must be >= 0, got %v", c.Timeout)
	case c.MaxResponse < 0:
		return fmt.Errorf("http.max_response must be >= 0, got %d", c.MaxResponse)
	case c.MaxRequest < 0:
		return fmt.Errorf("http.max_request must be >= 0, got %d", c.MaxRequest)
	}
	if err := validateMethods("http", c.Methods, c.Aggregate != nil); err != nil {
		return err
	}
	if err := c.Aggregate.validate("http.aggregate", true); err != nil {
		return err
	}
	for i, m := range c.Methods {
		at := fmt.Sprintf("http.methods[%d]", i)
		if m.Passthrough && m.Stream {
			return fmt.Errorf("%s: set passthrough or stream, not both", at)
		}
		if m.Passthrough {
			switch {
			case m.Route != "":
				return fmt.Errorf("%s.route must be empty for a passthrough method: the request carries its own path", at)
			case m.Verb != "":
				return fmt.Errorf("%s.verb must be empty for a passthrough method: the request carries its own method", at)
			case len(m.Args) > 0:
				return fmt.Errorf("%s.args is for exec services only", at)
			}
			continue
		}
		switch {
		case !strings.HasPrefix(m.Route, "/"):
			return fmt.Errorf("%s.route %q must start with /", at, m.Route)
		case len(m.Args) > 0:
			return fmt.Errorf("%s.args is for exec services only", at)
		}
		switch strings.ToUpper(m.Verb) {
		case "", "GET", "POST", "PUT", "PATCH", "DELETE":
		default:
			return fmt.Errorf("%s.verb %q is not GET, POST, PUT, PATCH or DELETE", at, m.Verb)
		}
	}
	return nil
}

// Headers Neptune sets on every request to the program.
const (
	HeaderPartition = "Neptune-Partition"
	HeaderLSN       = "Neptune-LSN"
	HeaderMethod    = "Neptune-Method"
)

type httpService struct {
	cfg    HTTPConfig
	base   string
	client *http.Client
	// raw serves passthrough methods: it follows no redirect and asks for
	// no compression of its own, so the client sees the program's answer
	// as the program sent it.
	raw *http.Client
}

// NewHTTP returns the service name backed by the HTTP program in c. The
// request body is sent as is and the response body returned as is.
// Statuses map to errors: 2xx is success; 429 and 503 wrap
// neptune.ErrOverloaded (retryable); other 4xx wrap ErrBadRequest; 5xx
// wrap ErrProgram; each message carries the status and the start of the
// program's answer.
func NewHTTP(name string, c HTTPConfig) (neptune.Service, error) {
	if err := c.Validate(); err != nil {
		return neptune.Service{}, fmt.Errorf("adapter: %w", err)
	}
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Second
	}
	c.MaxRequest, c.MaxResponse = orDefault(c.MaxRequest), orDefault(c.MaxResponse)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256 // one node's workers all talk to one program
	rawTr := tr.Clone()
	rawTr.DisableCompression = true
	h := &httpService{
		cfg: c, base: strings.TrimRight(c.BaseURL, "/"), client: &http.Client{Transport: tr},
		raw: &http.Client{Transport: rawTr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
	}
	svc := neptune.Service{Name: name}
	for _, m := range c.Methods {
		mode, _ := neptune.ParseMode(m.Mode)
		if m.Passthrough {
			svc.Methods = append(svc.Methods, neptune.Method{Name: m.Name, Mode: mode, Handler: h.passthrough})
			continue
		}
		verb := strings.ToUpper(m.Verb)
		if verb == "" {
			verb = http.MethodPost
		}
		route := m.Route
		if m.Stream {
			svc.Methods = append(svc.Methods, neptune.Method{Name: m.Name, Mode: mode, Stream: h.stream(mode, verb, route)})
			continue
		}
		svc.Methods = append(svc.Methods, neptune.Method{Name: m.Name, Mode: mode, Handler: func(ctx context.Context, r *neptune.Request) (*neptune.Response, error) {
			body, err := h.do(ctx, verb, route, r.Method, r.Partition, r.LSN, r.Body)
			if err != nil {
				return nil, err
			}
			return &neptune.Response{Body: body, Version: r.LSN}, nil
		}})
	}
	if c.CheckRoute != "" {
		svc.Check = h.check
	}
	svc.Aggregate = c.Aggregate.aggregator(h.operator)
	return svc, nil
}

func (h *httpService) do(ctx context.Context, verb, route, method string, partition int, lsn uint64, body []byte) ([]byte, error) {
	return h.send(ctx, verb, route, method, partition, lsn, body, "")
}

// send is do for a method (operator "") or an aggregation operator
// (operator "local" or "reduce", partition -1 for a reduction: no
// partition header).
func (h *httpService) send(ctx context.Context, verb, route, method string, partition int, lsn uint64, body []byte, operator string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	if int64(len(body)) > h.cfg.MaxRequest {
		return nil, fmt.Errorf("%w: %s %s%s: request body of %d bytes exceeds http.max_request (%d); not sent", neptune.ErrTooLarge, verb, h.base, route, len(body), h.cfg.MaxRequest)
	}
	var rd io.Reader
	if len(body) > 0 {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, verb, h.base+route, rd)
	if err != nil {
		return nil, fmt.Errorf("adapter: %s %s: %w", verb, route, err)
	}
	if partition >= 0 {
		req.Header.Set(HeaderPartition, strconv.Itoa(partition))
	}
	if operator != "" {
		req.Header.Set(HeaderOperator, operator)
	} else {
		req.Header.Set(HeaderLSN, strconv.FormatUint(lsn, 10))
	}
	req.Header.Set(HeaderMethod, method)
	traceHeaders(ctx, req.Header)
	if len(body) > 0 {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	resp, err := h.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %s %s%s: %v", neptune.ErrDeadline, verb, h.base, route, err)
		}
		return nil, fmt.Errorf("%w: %s %s%s: %v", ErrUnreachable, verb, h.base, route, err)
	}
	defer resp.Body.Close()
	out, err := readCapped(resp, h.cfg.MaxResponse)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %s %s%s: reading the answer: %v", neptune.ErrDeadline, verb, h.base, route, err)
		}
		return nil, fmt.Errorf("%s %s%s: %w", verb, h.base, route, err)
	}
	if err := statusError(resp.StatusCode); err != nil {
		return nil, fmt.Errorf("%w: %s %s%s: status %d: %s", err, verb, h.base, route, resp.StatusCode, strings.TrimSpace(tail(out, 512)))
	}
	return out, nil
}

// passthrough forwards a framed request (see MarshalRequest) to the
// program and returns its framed answer. A status of the program's is its
// answer, not an error: only a request that cannot be parsed (ErrBadRequest),
// a program that cannot be reached (ErrUnreachable), an answer too large
// (ErrProgram) and the deadline (neptune.ErrDeadline) are errors.
func (h *httpService) passthrough(ctx context.Context, r *neptune.Request) (*neptune.Response, error) {
	in, body, err := UnmarshalRequest(r.Body)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if int64(len(body)) > h.cfg.MaxRequest {
		return nil, fmt.Errorf("%w: %s %s: request body of %d bytes exceeds http.max_request (%d); not sent", neptune.ErrTooLarge, in.Method, in.RequestURI, len(body), h.cfg.MaxRequest)
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	target := h.base + in.RequestURI
	req, err := http.NewRequestWithContext(ctx, in.Method, target, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s: %v", ErrBadRequest, in.Method, in.RequestURI, err)
	}
	req.ContentLength = int64(len(body))
	if len(body) == 0 {
		req.Body = http.NoBody
	}
	req.Header = in.Header
	RemoveHopHeaders(req.Header)
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header.Set("User-Agent", "") // send none rather than Go's own
	}
	req.Host = in.Host
	req.Header.Set(HeaderPartition, strconv.Itoa(r.Partition))
	req.Header.Set(HeaderLSN, strconv.FormatUint(r.LSN, 10))
	req.Header.Set(HeaderMethod, r.Method)
	traceHeaders(ctx, req.Header)
	resp, err := h.raw.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %s %s: %v", neptune.ErrDeadline, in.Method, target, err)
		}
		return nil, fmt.Errorf("%w: %s %s: %v", ErrUnreachable, in.Method, target, err)
	}
	defer resp.Body.Close()
	out, err := readCapped(resp, h.cfg.MaxResponse)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %s %s: reading the answer: %v", neptune.ErrDeadline, in.Method, target, err)
		}
		return nil, fmt.Errorf("%s %s: %w", in.Method, target, err)
	}
	RemoveHopHeaders(resp.Header)
	return &neptune.Response{Body: MarshalResponse(resp.StatusCode, resp.Header, out), Version: r.LSN}, nil
}

// traceHeaders tells the program which call its request belongs to: the
// W3C trace context of the handler's span (traceparent, tracestate) when
// the node traces, so the program's own spans join the call's trace, and
// the call's request id (X-Request-Id), which Neptune's logs carry.
func traceHeaders(ctx context.Context, h http.Header) {
	obs.Propagator.Inject(ctx, propagation.HeaderCarrier(h))
	if id := obs.RequestID(ctx); id != "" {
		h.Set(obs.HeaderRequestID, id)
	}
}

// statusError maps an HTTP status to the error it stands for, nil for 2xx.
func statusError(code int) error {
	switch {
	case code >= 200 && code < 300:
		return nil
	case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable:
		return neptune.ErrOverloaded
	case code >= 400 && code < 500:
		return ErrBadRequest
	default:
		return ErrProgram
	}
}

func (h *httpService) check(ctx context.Context, partition int, lsn uint64) (bool, error) {
	out, err := h.do(ctx, http.MethodGet, h.cfg.CheckRoute, "CHECK", partition, lsn, nil)
	if err != nil {
		return false, err
	}
	switch strings.TrimSpace(string(out)) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, fmt.Errorf("%w: GET %s%s: check answer %q is neither true nor false", ErrProgram, h.base, h.cfg.CheckRoute, tail(out, 64))
}

// DefaultMaxBody is the default cap on a request or response body an
// adapter passes: the node's default MaxMessageBytes, which a larger body
// could not cross anyway.
const DefaultMaxBody = 16 << 20

func orDefault(n int64) int64 {
	if n == 0 {
		return DefaultMaxBody
	}
	return n
}

// readCapped reads resp's body if it fits max: refused by its
// Content-Length before any byte is read, else read through a limit one
// byte past max and refused if it got there. Either way the error wraps
// neptune.ErrTooLarge; a failed read wraps ErrProgram.
func readCapped(resp *http.Response, max int64) ([]byte, error) {
	if resp.ContentLength > max {
		return nil, fmt.Errorf("%w: answer of %d bytes (Content-Length) exceeds max_response (%d)", neptune.ErrTooLarge, resp.ContentLength, max)
	}
	out, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return nil, fmt.Errorf("%w: reading the answer: %v", ErrProgram, err)
	}
	if int64(len(out)) > max {
		return nil, fmt.Errorf("%w: answer exceeds max_response (%d bytes)", neptune.ErrTooLarge, max)
	}
	return out, nil
}
