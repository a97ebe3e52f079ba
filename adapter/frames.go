package adapter

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// The messages of a stream travel as newline-delimited JSON (NDJSON),
// one frame per line: {"data": "text"} for a message that is UTF-8 text,
// {"base64": "..."} for any other bytes; {"end": true} ends the sender's
// side where the transport cannot (a WebSocket). The same frames carry a
// stream to an HTTP program (a stream method: the request body and the
// answer) and from an HTTP client through the gateway (a stream route).

// ContentTypeNDJSON is the media type of a stream's frames.
const ContentTypeNDJSON = "application/x-ndjson"

// Errors of reading frames. Both concern one frame; the next line is
// read as usual.
var (
	ErrFrameTooLarge = errors.New("frame too large")
	ErrBadFrame      = errors.New("malformed frame")
)

// frame is one message's frame, or the end of the sender's side.
type frame struct {
	Data   *string `json:"data"`
	Base64 *[]byte `json:"base64"`
	End    bool    `json:"end"`
}

// DecodeFrame parses one frame (a line without its newline, or a
// WebSocket text message) into the message's body; io.EOF is an end
// frame.
func DecodeFrame(b []byte) ([]byte, error) {
	var f frame
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadFrame, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: more than one JSON value on a line", ErrBadFrame)
	}
	switch {
	case f.End && f.Data == nil && f.Base64 == nil:
		return nil, io.EOF
	case f.End || (f.Data == nil) == (f.Base64 == nil):
		return nil, fmt.Errorf(`%w: want exactly one of "data" (text), "base64" and "end"`, ErrBadFrame)
	case f.Data != nil:
		return []byte(*f.Data), nil
	}
	return *f.Base64, nil
}

// AppendFrame appends body's frame and its newline to dst: text as
// "data", other bytes as "base64".
func AppendFrame(dst, body []byte) []byte {
	var f frame
	if utf8.Valid(body) {
		s := string(body)
		f.Data = &s
	} else {
		f.Base64 = &body
	}
	b, _ := json.Marshal(f) // a string or bytes always marshal
	return append(append(dst, b...), '\n')
}

// FrameReader reads newline-delimited frames, each at most max bytes
// without its newline. Blank lines are skipped. A line over max is
// skipped up to its newline and reported (ErrFrameTooLarge), as is a line
// that is no frame (ErrBadFrame); the next call reads the next line.
type FrameReader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

// NewFrameReader reads frames of at most max bytes from r.
func NewFrameReader(r io.Reader, max int) *FrameReader {
	return &FrameReader{r: bufio.NewReaderSize(r, min(max+1, 64<<10)), max: max}
}

// Next returns the next message's body; io.EOF at the end of the input
// or at an end frame (a last line without newline is a frame); else the
// read's error.
func (fr *FrameReader) Next() ([]byte, error) {
	for {
		line, err := fr.line()
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		return DecodeFrame(line)
	}
}

// line reads one line without its newline (and a trailing CR).
func (fr *FrameReader) line() ([]byte, error) {
	fr.buf = fr.buf[:0]
	over := false
	for {
		chunk, err := fr.r.ReadSlice('\n')
		if !over {
			if len(fr.buf)+len(chunk) > fr.max+1 { // +1: the newline
				over, fr.buf = true, fr.buf[:0]
			} else {
				fr.buf = append(fr.buf, chunk...)
			}
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF && (len(fr.buf) > 0 || over):
			// The last line, without newline.
		case err != nil:
			return nil, err
		}
		if over {
			return nil, fmt.Errorf("%w: over %d bytes", ErrFrameTooLarge, fr.max)
		}
		line := bytes.TrimSuffix(fr.buf, []byte{'\n'})
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(line) > fr.max {
			return nil, fmt.Errorf("%w: over %d bytes", ErrFrameTooLarge, fr.max)
		}
		return line, nil
	}
}
