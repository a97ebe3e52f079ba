package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// The frames of a stream route (docs/architecture/gateway.md, "Streams"):
// newline-delimited JSON over HTTP, one JSON object per text message over
// WebSocket. A client sends {"data": "text"} or {"base64": "..."} per
// message, and may end its side with {"end": true} (a WebSocket has no
// half-close; over HTTP the body's end does it); the gateway answers with
// outFrame objects.

// inFrame is one frame from the client: a message (exactly one of Data,
// UTF-8 text, and Base64, any bytes) or End.
type inFrame struct {
	Data   *string `json:"data"`
	Base64 *[]byte `json:"base64"`
	End    bool    `json:"end"`
}

// outFrame is one frame to the client: an answer (Data or Base64, with
// Message and Version on a write stream), a refused message (Message and
// Error: the stream goes on), or the last frame (End, with Error if the
// stream failed).
type outFrame struct {
	// Message is the number of the client's message (1, 2, ... in the
	// order sent, refused ones included) a frame answers or refuses.
	Message uint64      `json:"message,omitempty"`
	Version uint64      `json:"version,omitempty"`
	Data    *string     `json:"data,omitempty"`
	Base64  []byte      `json:"base64,omitempty"`
	Error   *frameError `json:"error,omitempty"`
	End     bool        `json:"end,omitempty"`
}

// frameError says why a message was refused or the stream ended: the
// HTTP status a call failing so would get, the reason, and for a write
// stream's failure which messages were applied.
type frameError struct {
	Status    int      `json:"status"`
	Text      string   `json:"text"`
	RequestID string   `json:"request_id,omitempty"`
	Outcome   *outcome `json:"outcome,omitempty"`
}

// outcome is a failed write stream's nerr.StreamOutcomeError in the
// client's message numbers: every message up to AppliedThrough that was
// not refused in a frame of its own was applied exactly once; those up to
// MaybeAppliedThrough may or may not have been; those after it up to
// SentThrough never were, nor any later one.
type outcome struct {
	StreamID            string `json:"stream_id"`
	AppliedThrough      uint64 `json:"applied_through"`
	MaybeAppliedThrough uint64 `json:"maybe_applied_through"`
	SentThrough         uint64 `json:"sent_through"`
	// HandlerFailed: message AppliedThrough+1 (the next not refused) ran
	// and its handler failed; the error is its answer.
	HandlerFailed bool `json:"handler_failed,omitempty"`
}

// String says it in words, as StreamOutcomeError does in seqs.
func (o *outcome) String() string {
	s := fmt.Sprintf("write stream %s: messages through %d applied", o.StreamID, o.AppliedThrough)
	switch {
	case o.HandlerFailed:
		s += fmt.Sprintf(", message %d ran and failed", o.MaybeAppliedThrough)
	case o.MaybeAppliedThrough > o.AppliedThrough:
		s += fmt.Sprintf(", after that through %d outcome unknown", o.MaybeAppliedThrough)
	}
	if o.SentThrough > o.MaybeAppliedThrough {
		s += fmt.Sprintf(", after that through %d never applied", o.SentThrough)
	}
	return s + " (messages refused in frames of their own never were)"
}

// answerFrame is an answer to the client, as text when it is UTF-8.
func answerFrame(body []byte) outFrame {
	if utf8.Valid(body) {
		s := string(body)
		return outFrame{Data: &s}
	}
	return outFrame{Base64: body}
}

// Errors of reading frames. Both concern one frame: the stream goes on.
var (
	errFrameTooLarge = errors.New("frame too large")
	errBadFrame      = errors.New("malformed frame")
)

// decodeFrame parses one frame (a line without its newline, or a
// WebSocket text message) into the message's body; io.EOF: the client's
// side ends.
func decodeFrame(b []byte) ([]byte, error) {
	var f inFrame
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %v", errBadFrame, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: more than one JSON value on a line", errBadFrame)
	}
	switch {
	case f.End && f.Data == nil && f.Base64 == nil:
		return nil, io.EOF
	case f.End || (f.Data == nil) == (f.Base64 == nil):
		return nil, fmt.Errorf(`%w: want exactly one of "data" (text), "base64" and "end"`, errBadFrame)
	case f.Data != nil:
		return []byte(*f.Data), nil
	}
	return *f.Base64, nil
}

// encodeFrame is in as a line, newline included (the client's side:
// tests and examples).
func encodeFrame(body []byte) []byte {
	var f inFrame
	if utf8.Valid(body) {
		s := string(body)
		f.Data = &s
	} else {
		f.Base64 = &body
	}
	b, _ := json.Marshal(f) // strings and bytes always marshal
	return append(b, '\n')
}

// frameReader reads newline-delimited frames, each at most max bytes
// without its newline. Blank lines are skipped. A line over max is
// skipped up to its newline and reported (errFrameTooLarge), as is a line
// that is no frame (errBadFrame); the next call reads the next line.
type frameReader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

func newFrameReader(r io.Reader, max int) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(r, min(max+1, 64<<10)), max: max}
}

// next returns the next message's body, or io.EOF at the end of the input
// (a last line without newline is a frame), or the read's error.
func (fr *frameReader) next() ([]byte, error) {
	for {
		line, err := fr.line()
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		return decodeFrame(line)
	}
}

// line reads one line without its newline (and a trailing CR).
func (fr *frameReader) line() ([]byte, error) {
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
			return nil, fmt.Errorf("%w: over %d bytes", errFrameTooLarge, fr.max)
		}
		line := bytes.TrimSuffix(fr.buf, []byte{'\n'})
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(line) > fr.max {
			return nil, fmt.Errorf("%w: over %d bytes", errFrameTooLarge, fr.max)
		}
		return line, nil
	}
}
