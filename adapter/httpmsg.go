package adapter

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// The passthrough framing. A front end that exposes an HTTP program
// transparently (the gateway, internal/gateway) sends the client's whole
// request as the body of a Neptune call to a passthrough method, and gets
// the program's whole response back as the response body. Each is an
// HTTP/1.1 message, the message/http media type of RFC 9112 §10.1:
//
//	GET /users/7?full=1 HTTP/1.1\r\n
//	Host: shop.example\r\n
//	Accept: text/html\r\n
//	Content-Length: 0\r\n
//	\r\n
//
//	HTTP/1.1 200 OK\r\n
//	Content-Type: text/html\r\n
//	Content-Length: 12\r\n
//	\r\n
//	<p>hello</p>
//
// Why this and not a schema of our own: both ends already have a parser
// that is fuzzed and maintained (net/http's ReadRequest and ReadResponse),
// it carries everything a program may look at (method, the target as sent
// with its escaping and query, every header in order including repeated
// ones, the body) with nothing to invent, and it reads as plain text in a
// packet capture. Bodies are always framed by Content-Length, never
// chunked, and only end-to-end headers travel: hop-by-hop ones belong to
// each connection (RFC 9110 §7.6.1) and are removed on both sides.

// ContentTypeHTTPMessage is the media type of the framing.
const ContentTypeHTTPMessage = "message/http"

// ErrFraming wraps every error of parsing a framed message.
var ErrFraming = errors.New("adapter: malformed message/http")

// hopHeaders are the hop-by-hop headers of RFC 9110 §7.6.1 and the
// de-facto ones net/http/httputil.ReverseProxy removes as well.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// RemoveHopHeaders deletes the hop-by-hop headers from h, and those the
// Connection header names.
func RemoveHopHeaders(h http.Header) {
	for _, v := range h.Values("Connection") {
		for _, f := range strings.Split(v, ",") {
			if f = textproto.TrimString(f); f != "" {
				h.Del(f)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

// MarshalRequest frames a request: method, target (the request-target as
// the client sent it, origin form: path and query), Host, the end-to-end
// headers of h and body. Content-Length is set from body; headers whose
// name or value could break the framing (CR, LF, NUL, or a name that is
// not a token) are left out rather than sent.
func MarshalRequest(method, target, host string, h http.Header, body []byte) ([]byte, error) {
	if !httpguts.ValidHeaderFieldName(method) {
		return nil, fmt.Errorf("%w: method %q is not a token", ErrFraming, method)
	}
	if !strings.HasPrefix(target, "/") || strings.ContainsAny(target, " \r\n\x00") {
		return nil, fmt.Errorf("%w: target %q is not an origin-form path", ErrFraming, target)
	}
	if strings.ContainsAny(host, " \r\n\x00") {
		return nil, fmt.Errorf("%w: host %q", ErrFraming, host)
	}
	var b bytes.Buffer
	b.Grow(256 + len(body))
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, target, host)
	writeHeaders(&b, h, "Host")
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(body))
	b.Write(body)
	return b.Bytes(), nil
}

// UnmarshalRequest parses a framed request. The request's Body is already
// read into body (and req.Body is empty); its RequestURI is in origin form.
// Bytes after the message are an error: one framed message is one request.
func UnmarshalRequest(msg []byte) (req *http.Request, body []byte, err error) {
	rd := bufio.NewReader(bytes.NewReader(msg))
	req, err = http.ReadRequest(rd)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrFraming, err)
	}
	if !strings.HasPrefix(req.RequestURI, "/") {
		return nil, nil, fmt.Errorf("%w: target %q is not an origin-form path", ErrFraming, req.RequestURI)
	}
	if body, err = io.ReadAll(req.Body); err != nil {
		return nil, nil, fmt.Errorf("%w: body: %v", ErrFraming, err)
	}
	if rd.Buffered() > 0 {
		return nil, nil, fmt.Errorf("%w: %d bytes after the request", ErrFraming, rd.Buffered())
	}
	req.Body = http.NoBody
	return req, body, nil
}

// MarshalResponse frames a response: status, the end-to-end headers of h
// and body, with Content-Length set from body. An empty body keeps a
// Content-Length h carries, which is how the answer to a HEAD request
// tells the size of what GET would send.
func MarshalResponse(status int, h http.Header, body []byte) []byte {
	var b bytes.Buffer
	b.Grow(256 + len(body))
	text := http.StatusText(status)
	if text == "" {
		text = "status " + strconv.Itoa(status)
	}
	fmt.Fprintf(&b, "HTTP/1.1 %03d %s\r\n", status, text)
	if len(body) == 0 && h.Get("Content-Length") != "" {
		writeHeaders(&b, h)
		b.WriteString("\r\n")
		return b.Bytes()
	}
	writeHeaders(&b, h, "Content-Length")
	if status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n")
	b.Write(body)
	return b.Bytes()
}

// UnmarshalResponse parses a framed response to a request of method
// (which says whether a body follows: none for HEAD). Bytes after the
// message are an error.
func UnmarshalResponse(msg []byte, method string) (status int, h http.Header, body []byte, err error) {
	rd := bufio.NewReader(bytes.NewReader(msg))
	resp, err := http.ReadResponse(rd, &http.Request{Method: method})
	if err != nil {
		return 0, nil, nil, fmt.Errorf("%w: %v", ErrFraming, err)
	}
	defer resp.Body.Close()
	if body, err = io.ReadAll(resp.Body); err != nil {
		return 0, nil, nil, fmt.Errorf("%w: body: %v", ErrFraming, err)
	}
	if rd.Buffered() > 0 {
		return 0, nil, nil, fmt.Errorf("%w: %d bytes after the response", ErrFraming, rd.Buffered())
	}
	return resp.StatusCode, resp.Header, body, nil
}

// writeHeaders writes h's end-to-end headers but those in skip, in a
// stable order (sorted names, values in order).
func writeHeaders(b *bytes.Buffer, h http.Header, skip ...string) {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	hop := map[string]bool{}
	for _, k := range hopHeaders {
		hop[k] = true
	}
	for _, v := range h.Values("Connection") {
		for _, f := range strings.Split(v, ",") {
			hop[http.CanonicalHeaderKey(textproto.TrimString(f))] = true
		}
	}
	for _, s := range skip {
		hop[http.CanonicalHeaderKey(s)] = true
	}
	for _, k := range names {
		ck := http.CanonicalHeaderKey(k)
		if hop[ck] || !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range h[k] {
			if strings.ContainsAny(v, "\r\n\x00") {
				continue
			}
			fmt.Fprintf(b, "%s: %s\r\n", ck, v)
		}
	}
}
