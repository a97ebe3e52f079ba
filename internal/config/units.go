// Package config defines each of Neptune's configs once: the value types
// every configuration file and flag shares (a duration and a size as an
// operator writes them, "250ms", "64MiB", which the gateway's and the
// commands' configs alias), and the public API's configs (Node, Client,
// Security, RetryPolicy, Storage), which the root package aliases and the
// node and client runtimes embed.
package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration written as "250ms", "1s", ...
type Duration time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration like 250ms or 1s", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// Size is a number of bytes written as 1048576, "64KiB", "1MiB", "2MB"
// (powers of 1000) or "512B"; a YAML value and a flag value.
type Size int64

// ParseSize parses "1MiB", "64KiB", "2MB", "512B" or a plain number.
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
	num := strings.TrimRightFunc(t, func(r rune) bool { return r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' })
	mult := map[string]float64{"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}[strings.ToLower(strings.TrimSpace(t[len(num):]))]
	x, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || mult == 0 || x < 0 || math.IsInf(x*mult, 0) || math.IsNaN(x) || x*mult > math.MaxInt64/2 {
		return 0, fmt.Errorf("%q is not a size like 1048576, 64KiB, 1MiB or 2MB", s)
	}
	return Size(x * mult), nil
}

// UnmarshalYAML parses a size.
func (b *Size) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseSize(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*b = v
	return nil
}

// String, Set and Type make Size a flag value.
func (b *Size) String() string { return strconv.FormatInt(int64(*b), 10) }

// Set parses a flag's value.
func (b *Size) Set(s string) error {
	v, err := ParseSize(s)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// Type names the flag's value in help.
func (b *Size) Type() string { return "size" }
