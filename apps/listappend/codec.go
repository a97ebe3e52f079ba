package listappend

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// Limits on what a request may carry. They are checked before a body is
// parsed or copied, so an oversized body costs nothing but its rejection.
const (
	// MaxKeyLen is the longest key, in bytes.
	MaxKeyLen = 256
	// maxElemLen is the longest canonical decimal uint64 (18446744073709551615).
	maxElemLen = 20
	// MaxAppendBody is the longest append body: a key, '=' and an element.
	MaxAppendBody = MaxKeyLen + 1 + maxElemLen
	// MaxListBytes caps a key's list by the size of its encoded read
	// response, so every read answer stays far below the transport's message
	// limit however long a workload runs. An append beyond it fails with
	// ErrListFull; that is decided by the list alone, so every replica
	// rejects the same appends.
	MaxListBytes = 4 << 20
)

// Errors the methods return; test with errors.Is.
var (
	// ErrBadRequest is returned for a malformed body.
	ErrBadRequest = errors.New("listappend: malformed request")
	// ErrTooLarge is returned for a body longer than its method allows.
	ErrTooLarge = errors.New("listappend: request too large")
	// ErrListFull is returned for an append to a list at MaxListBytes.
	ErrListFull = errors.New("listappend: list full")
	// ErrClosed is returned by a store after Close.
	ErrClosed = errors.New("listappend: store closed")
)

// EncodeAppend returns the body of an append of elem to key's list:
// "key=elem" with elem in canonical decimal. Text rather than binary so a
// body can be typed at a command line and read in a log.
func EncodeAppend(key string, elem uint64) []byte {
	b := make([]byte, 0, len(key)+1+maxElemLen)
	b = append(b, key...)
	b = append(b, '=')
	return strconv.AppendUint(b, elem, 10)
}

// DecodeAppend parses an append body. It accepts exactly what EncodeAppend
// produces for a valid key, so every accepted body has one meaning: the
// element must be canonical decimal (no sign, no leading zeros), since
// "07" and "7" naming the same element would let two encodings of one
// write look different in a log.
func DecodeAppend(body []byte) (key string, elem uint64, err error) {
	if len(body) > MaxAppendBody {
		return "", 0, fmt.Errorf("%w: append body is %d bytes, the limit is %d", ErrTooLarge, len(body), MaxAppendBody)
	}
	k, e, ok := bytes.Cut(body, []byte("="))
	if !ok {
		return "", 0, fmt.Errorf("%w: append wants key=element, got %s", ErrBadRequest, preview(body))
	}
	if err := validKey(k); err != nil {
		return "", 0, fmt.Errorf("append: %w", err)
	}
	elem, err = parseElem(e)
	if err != nil {
		return "", 0, fmt.Errorf("append to %q: %w", k, err)
	}
	return string(k), elem, nil
}

// DecodeReadKey parses a read body: the key itself.
func DecodeReadKey(body []byte) (string, error) {
	if len(body) > MaxKeyLen {
		return "", fmt.Errorf("%w: read body is %d bytes, the longest key is %d", ErrTooLarge, len(body), MaxKeyLen)
	}
	if err := validKey(body); err != nil {
		return "", fmt.Errorf("read: %w", err)
	}
	return string(body), nil
}

// validKey accepts 1..MaxKeyLen bytes of UTF-8 without '=', spaces or
// unprintable characters: '=' separates an append's key from its element,
// and the rest keeps keys unambiguous in logs and reports.
func validKey(k []byte) error {
	switch {
	case len(k) == 0:
		return fmt.Errorf("%w: the key is empty", ErrBadRequest)
	case len(k) > MaxKeyLen:
		return fmt.Errorf("%w: the key is %d bytes, the limit is %d", ErrTooLarge, len(k), MaxKeyLen)
	case !utf8.Valid(k):
		return fmt.Errorf("%w: the key %s is not UTF-8", ErrBadRequest, preview(k))
	}
	for _, r := range string(k) {
		if r == '=' || r == ' ' || !unicode.IsPrint(r) {
			return fmt.Errorf("%w: the key %s contains %q (keys are printable, without spaces or '=')", ErrBadRequest, preview(k), r)
		}
	}
	return nil
}

// parseElem parses a canonical decimal uint64.
func parseElem(e []byte) (uint64, error) {
	switch {
	case len(e) == 0:
		return 0, fmt.Errorf("%w: the element is empty", ErrBadRequest)
	case len(e) > maxElemLen:
		return 0, fmt.Errorf("%w: the element %s is longer than a uint64", ErrBadRequest, preview(e))
	case len(e) > 1 && e[0] == '0':
		return 0, fmt.Errorf("%w: the element %s has a leading zero", ErrBadRequest, preview(e))
	}
	for _, c := range e {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: the element %s is not a decimal number", ErrBadRequest, preview(e))
		}
	}
	v, err := strconv.ParseUint(string(e), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: the element %s: %w", ErrBadRequest, preview(e), err)
	}
	return v, nil
}

// EncodeList returns a read's answer: the elements in decimal, separated
// by single spaces; an empty list is an empty body.
func EncodeList(list []uint64) []byte {
	b := make([]byte, 0, encodedLen(list))
	for i, e := range list {
		if i > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendUint(b, e, 10)
	}
	return b
}

// DecodeList parses a read's answer, strictly (the inverse of EncodeList),
// so a client notices a garbled answer instead of misreading it.
func DecodeList(b []byte) ([]uint64, error) {
	if len(b) == 0 {
		return nil, nil
	}
	list := make([]uint64, 0, bytes.Count(b, []byte(" "))+1)
	for f := range bytes.SplitSeq(b, []byte(" ")) {
		e, err := parseElem(f)
		if err != nil {
			return nil, fmt.Errorf("list element %d: %w", len(list), err)
		}
		list = append(list, e)
	}
	return list, nil
}

// elemLen is the length of e in decimal.
func elemLen(e uint64) int {
	n := 1
	for e >= 10 {
		e /= 10
		n++
	}
	return n
}

// encodedLen is len(EncodeList(list)).
func encodedLen(list []uint64) int {
	n := max(len(list)-1, 0)
	for _, e := range list {
		n += elemLen(e)
	}
	return n
}

// preview quotes at most the first 32 bytes of b, so an error about a
// huge or binary body stays short and printable.
func preview(b []byte) string {
	const n = 32
	if len(b) <= n {
		return strconv.Quote(string(b))
	}
	return strconv.Quote(string(b[:n])) + fmt.Sprintf("... (%d bytes)", len(b))
}
