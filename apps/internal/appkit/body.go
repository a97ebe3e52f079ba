package appkit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
)

// Decode parses body as exactly one JSON value into v, rejecting unknown
// fields so that a misspelt field is an error rather than a silent zero.
// Errors wrap bad, the calling service's malformed-request sentinel.
func Decode(bad error, method string, body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %s: %v", bad, method, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: %s: trailing data after the JSON object", bad, method)
	}
	return nil
}

// Encode marshals a response body; the types used here cannot fail.
func Encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("appkit: encode %T: %v", v, err))
	}
	return b
}

// Partition maps a key (a topic, a category) to one of n partitions with
// FNV-1a, so every client agrees without a directory.
func Partition(key string, n int) int {
	if n <= 0 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}
