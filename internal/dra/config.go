package dra

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/request"
)

// The compute and memory limits of a claim are the cluster admin's or the
// host's, never the claim author's: a DeviceClass may carry, in
// spec.config, opaque parameters for driver vgpu.io (ClassConfig); the
// scheduler copies them into the allocation marked FromClass. Without one
// the host's kubernetes.cores_limit and kubernetes.memory_limit hold.
// The claims' priority is the class's too (priority; left out:
// defaults.priority). Parameters a claim gives for vgpu.io (FromClaim),
// a priority among them, are refused: they would let a pod's author lift
// their own cap or put their work before their neighbours'.

// ClassConfig is the DeviceClass's opaque configuration for vgpu.io:
//
//	config:
//	- opaque:
//	    driver: vgpu.io
//	    parameters: {apiVersion: vgpu.io/v1, kind: ClassConfig, coresLimit: none, memoryLimit: 32Gi, priority: high}
type ClassConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// CoresLimit is the compute limit of the claims of this class, as the
	// host key: "request" (the limit is the cores requested, a cap) or
	// "none" (100); "" (left out): the host's.
	CoresLimit string `json:"coresLimit,omitempty"`
	// MemoryLimit is their memory limit, as the host key: "request", "none"
	// or a size (at least the request); "" (left out): the host's.
	MemoryLimit string `json:"memoryLimit,omitempty"`
	// Priority of the claims' devices: "high", "normal" or "low"; ""
	// (left out): the host's defaults.priority.
	Priority string `json:"priority,omitempty"`
}

// The apiVersion and kind of ClassConfig.
const (
	ConfigAPIVersion = "vgpu.io/v1"
	ConfigKind       = "ClassConfig"
)

// ParseClassConfig reads a ClassConfig from opaque parameters (JSON, as the
// API server stores them): exactly one object, no unknown fields, apiVersion
// and kind as above, at least one of coresLimit and memoryLimit, each one of
// its host key's values.
func ParseClassConfig(raw []byte) (ClassConfig, error) {
	var c ClassConfig
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("parameters %.80q: %v: want {\"apiVersion\": %q, \"kind\": %q, \"coresLimit\": %q or %q, \"memoryLimit\": %q, %q or a size, \"priority\": \"high\", \"normal\" or \"low\"}",
			raw, err, ConfigAPIVersion, ConfigKind, config.CoresLimitRequest, config.CoresLimitNone, config.MemoryLimitRequest, config.MemoryLimitNone)
	}
	if _, err := dec.Token(); err != io.EOF {
		return c, fmt.Errorf("parameters %.80q: more than one JSON object; give one", raw)
	}
	if c.APIVersion != ConfigAPIVersion || c.Kind != ConfigKind {
		return c, fmt.Errorf("parameters: apiVersion %q, kind %q: want apiVersion %q, kind %q", c.APIVersion, c.Kind, ConfigAPIVersion, ConfigKind)
	}
	if c.CoresLimit == "" && c.MemoryLimit == "" && c.Priority == "" {
		return c, fmt.Errorf("parameters: none of coresLimit, memoryLimit and priority: give at least one (without a config the host's kubernetes.cores_limit, memory_limit and defaults.priority hold)")
	}
	if c.Priority != "" {
		if _, err := request.ParsePriorityValue(c.Priority); err != nil {
			return c, fmt.Errorf("parameters: priority %q: use \"high\", \"normal\" or \"low\" (left out: the host's defaults.priority)", c.Priority)
		}
	}
	if c.CoresLimit != "" && c.CoresLimit != config.CoresLimitRequest && c.CoresLimit != config.CoresLimitNone {
		return c, fmt.Errorf("parameters: coresLimit %q: use %q (the limit is the cores requested) or %q (no limit: the idle GPU is used)",
			c.CoresLimit, config.CoresLimitRequest, config.CoresLimitNone)
	}
	if _, err := config.MemoryLimitSize(c.MemoryLimit); err != nil {
		return c, fmt.Errorf("parameters: memoryLimit %w", err)
	}
	return c, nil
}

// Limits are the limit policies of a claim's vgpu.io devices, as the host
// keys kubernetes.cores_limit and kubernetes.memory_limit take them, and
// their priority ("": the host's defaults.priority).
type Limits struct{ Cores, Memory, Priority string }

// classLimits are the limit policies of claim c's vgpu.io devices: for each
// of cores and memory, the one the class-level configs for vgpu.io that
// apply to them give, else host's (the host's kubernetes.cores_limit and
// memory_limit). A claim-level config for vgpu.io, a class config that does
// not parse, or two classes' that disagree: an error naming the claim, and
// nothing is prepared.
func classLimits(c *resourceapi.ResourceClaim, host Limits) (Limits, error) {
	src := fmt.Sprintf("claim %s/%s", c.Namespace, c.Name)
	ours := map[string]bool{} // the requests (and their parents) allocated vgpu.io devices
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver == DriverName {
			ours[r.Request] = true
			if p, _, ok := strings.Cut(r.Request, "/"); ok {
				ours[p] = true
			}
		}
	}
	var got Limits
	from := [3]string{}
	for i, cf := range c.Status.Allocation.Devices.Config {
		if cf.Opaque == nil || cf.Opaque.Driver != DriverName {
			continue
		}
		applies := len(cf.Requests) == 0
		for _, r := range cf.Requests {
			applies = applies || ours[r]
		}
		if !applies {
			continue
		}
		if cf.Source != resourceapi.AllocationConfigSourceClass {
			return host, fmt.Errorf("%s: its spec.devices.config gives parameters for driver %s: the compute and memory limits and the priority are set by the DeviceClass or the host (kubernetes.cores_limit, memory_limit, defaults.priority), never by a claim; remove that config from the claim",
				src, DriverName)
		}
		cc, err := ParseClassConfig(cf.Opaque.Parameters.Raw)
		if err != nil {
			return host, fmt.Errorf("%s: the DeviceClass's config for driver %s (allocation config %d): %w", src, DriverName, i, err)
		}
		for k, f := range []struct {
			name string
			have *string
			give string
		}{{"coresLimit", &got.Cores, cc.CoresLimit}, {"memoryLimit", &got.Memory, cc.MemoryLimit}, {"priority", &got.Priority, cc.Priority}} {
			if f.give == "" {
				continue
			}
			if *f.have != "" && *f.have != f.give {
				return host, fmt.Errorf("%s: its DeviceClasses' configs for driver %s disagree: %s %q (config %s) and %q (config %d); allocate the claim's devices from classes that agree",
					src, DriverName, f.name, *f.have, from[k], f.give, i)
			}
			*f.have, from[k] = f.give, fmt.Sprint(i)
		}
	}
	if got.Cores == "" {
		got.Cores = host.Cores
	}
	if got.Memory == "" {
		got.Memory = host.Memory
	}
	if got.Priority == "" {
		got.Priority = host.Priority
	}
	return got, nil
}
