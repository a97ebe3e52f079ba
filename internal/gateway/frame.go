package gateway

import (
	"fmt"
	"unicode/utf8"
)

// The frames of a stream route (docs/architecture/gateway.md, "Streams")
// are the adapter's (adapter.FrameReader): newline-delimited JSON over
// HTTP, one JSON object per text message over WebSocket. The client sends
// messages as adapter frames; the gateway answers with outFrame objects.

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
