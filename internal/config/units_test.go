package config

import (
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]Size{"0": 0, "512": 512, "512B": 512, "64KiB": 64 << 10, "512 KiB": 512 << 10, "1MiB": 1 << 20,
		"64MiB": 64 << 20, "2MB": 2e6, "1.5 kb": 1500, "1GiB": 1 << 30, "1048576": 1 << 20} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "-1MiB", "1XB", "MiB", "1e300GiB", "NaN", "99999999999GiB"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
}

func TestYAML(t *testing.T) {
	var v struct {
		D Duration `yaml:"d"`
		S Size     `yaml:"s"`
	}
	if err := yaml.Unmarshal([]byte("d: 250ms\ns: 64MiB\n"), &v); err != nil || v.D != Duration(250e6) || v.S != 64<<20 {
		t.Fatalf("%+v, %v", v, err)
	}
	for _, bad := range []string{"d: 10\n", "s: lots\n"} {
		if err := yaml.Unmarshal([]byte(bad), &v); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
