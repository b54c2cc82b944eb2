package shim

import (
	"errors"
	"fmt"
	"os"

	"github.com/pelletier/go-toml/v2"

	"github.com/vgpu-dev/vgpu/internal/spec"
)

// TEMPORARY stand-ins until internal/config, spec.ParseRequest and
// internal/inject land: a container that asks for nothing passes through
// untouched; one that asks for a GPU is refused (fail closed), never run
// without its limits.

type shimConfig struct {
	StateDir string   `toml:"state_dir"`
	Runtimes []string `toml:"runtimes"`
}

func (c *shimConfig) settings() settings {
	st := settings{runtimes: c.Runtimes, stateDir: c.StateDir}
	if len(st.runtimes) == 0 {
		st.runtimes = DefaultRuntimes
	}
	if st.stateDir == "" {
		st.stateDir = DefaultStateDir
	}
	return st
}

func loadConfig(path string) (*shimConfig, error) {
	c := &shimConfig{}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, err
	}
	if err := toml.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Request parses the container's GPU request (nil: it asks for nothing).
func Request(s *spec.Spec) (*spec.Request, error) {
	req, err := spec.ParseRequest(s.Env(), s.Annotations())
	if err != nil {
		return nil, fmt.Errorf("bad GPU request: %w", err)
	}
	return req, nil
}

func prepare(inv *Invocation, cfg *shimConfig, log *Logger) (undo func(), err error) {
	s, err := spec.LoadBundle(inv.Bundle)
	if err != nil {
		return nil, err
	}
	req, err := Request(s)
	if err != nil || req == nil {
		return func() {}, err
	}
	return nil, errors.New("container " + inv.ID + " asks for a GPU, but this build cannot give it one yet (internal/inject missing)")
}
