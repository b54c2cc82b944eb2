package spec

import specs "github.com/opencontainers/runtime-spec/specs-go"

// Mounts returns the spec's mounts.
func (s *Spec) Mounts() ([]specs.Mount, error) {
	var m []specs.Mount
	_, err := s.decode(nil, "mounts", &m)
	return m, err
}
