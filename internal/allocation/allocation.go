// Package allocation is the trusted channel between the Kubernetes device
// plugin and vgpu-runtime. The plugin's Allocate writes one Record per
// allocation into a directory only root can write, and returns an annotation
// (grant.vgpu.io/<resource> = record ID; the key and the directory keep the
// names of the release that called these records grants) that the kubelet
// puts on the container's CRI config; containerd passes it into the OCI spec
// only because its container_annotations allow it. A pod cannot write such a
// record, and a pod's own annotations never reach the container under that
// key (the key is outside pod_annotations), so in Kubernetes mode the
// allocation is the only source of a GPU request (see ../request for the
// other sources).
//
// This package has no Kubernetes or gRPC dependency: vgpu-runtime imports it
// and must start fast.
package allocation

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/vgpu-dev/vgpu/internal/atomicfile"

	"golang.org/x/sys/unix"
)

// DefaultDir holds the records on the host.
const DefaultDir = "/run/vgpu/grants"

// Resources the device plugin advertises.
const (
	ResourceMemory = "vgpu.io/memory" // device memory, in units of UnitBytes
	ResourceCores  = "vgpu.io/cores"  // percent of one GPU's compute
)

// AnnotationPrefix starts the annotation that carries a record's ID:
// grant.vgpu.io/memory and grant.vgpu.io/cores. containerd must list it in
// container_annotations and must not let pod annotations of that name through
// (pod_annotations).
const AnnotationPrefix = "grant.vgpu.io/"

// CRIContainerTypeAnnotation is set by containerd's CRI on every container
// it creates for Kubernetes (a pod cannot leave it out).
const CRIContainerTypeAnnotation = "io.kubernetes.cri.container-type"

// Record is one allocation of one resource to one container.
type Record struct {
	ID       string `json:"id"`       // 32 hex digits, random
	Resource string `json:"resource"` // ResourceMemory or ResourceCores
	GPUUUID  string `json:"gpuUUID"`
	GPUIndex int    `json:"gpuIndex"`
	Units    int    `json:"units"`
	// MemoryBytes (memory) or ComputePercent (cores): what Units amount to.
	MemoryBytes    uint64    `json:"memoryBytes,omitempty"`
	ComputePercent int       `json:"computePercent,omitempty"`
	DeviceIDs      []string  `json:"deviceIDs"` // the plugin's unit IDs the kubelet allocated
	Created        time.Time `json:"created"`
}

// AnnotationKey is the annotation naming a record of resource.
func AnnotationKey(resource string) string {
	return AnnotationPrefix + strings.TrimPrefix(resource, "vgpu.io/")
}

// NewID returns a fresh unguessable record ID: 16 bytes of getrandom(2),
// the kernel's CSPRNG (crypto/rand's source). Not crypto/rand itself:
// vgpu-runtime links this package, and crypto/rand's FIPS module runs its
// package init (self-tests, DRBG) in every container start.
func NewID() (string, error) {
	var b [16]byte
	for n := 0; n < len(b); {
		m, err := unix.Getrandom(b[n:], 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("getrandom: %w", err)
		}
		n += m
	}
	return hex.EncodeToString(b[:]), nil
}

func validID(id string) bool {
	if len(id) != 32 {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil && strings.ToLower(id) == id
}

// Write stores r atomically in dir (created 0700), as <ID>.json 0600.
func Write(dir string, r *Record) error {
	if !validID(r.ID) {
		return fmt.Errorf("allocation ID %q: want 32 lower-case hex digits", r.ID)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, r.ID+".json"), append(data, '\n'), 0o600)
}

// trusted refuses a path that someone other than root could have written.
func trusted(path string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: no owner information", path)
	}
	if st.Uid != 0 {
		return fmt.Errorf("%s is owned by uid %d, not root: an allocation record must be written by the device plugin (root); remove it", path, st.Uid)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s is writable by group or others (mode %v): an allocation directory only root writes is required; chmod go-w it", path, fi.Mode().Perm())
	}
	return nil
}

// Read loads record id from dir, refusing anything not written by root.
func Read(dir, id string) (*Record, error) {
	if !validID(id) {
		return nil, fmt.Errorf("allocation ID %q is not 32 lower-case hex digits", id)
	}
	dfi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("allocation directory: %w", err)
	}
	if err := trusted(dir, dfi); err != nil {
		return nil, err
	}
	p := filepath.Join(dir, id+".json")
	f, err := os.Open(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("allocation %s: no record %s (was it allocated on this node by the vgpu device plugin?)", id, p)
		}
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", p)
	}
	if err := trusted(p, fi); err != nil {
		return nil, err
	}
	var r Record
	dec := json.NewDecoder(f)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if r.ID != id {
		return nil, fmt.Errorf("%s holds allocation %q, not %q", p, r.ID, id)
	}
	return &r, nil
}

// Remove deletes the record id (absent is fine).
func Remove(dir, id string) error {
	if !validID(id) {
		return fmt.Errorf("allocation ID %q is not 32 lower-case hex digits", id)
	}
	err := os.Remove(filepath.Join(dir, id+".json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// List returns every record in dir, ordered by ID.
func List(dir string) ([]*Record, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*Record
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !validID(id) {
			continue
		}
		r, err := Read(dir, id)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Container is what a container's allocation records give it: one GPU, and
// the memory and compute its records say (0: that resource was not
// allocated). The
// pipeline turns it into a pipeline.Allocation (this package stays below it).
type Container struct {
	UUID           string
	MemoryBytes    uint64
	ComputePercent int
	Source         string // names the records, for messages and vgpu status
}

// ForContainer reads a container's allocation annotations: nil when it carries
// none (it asked for no vgpu resource). The memory and cores records must
// name the same GPU: the device plugin's preferred allocation keeps them
// together, and a container whose units the kubelet split across GPUs is
// refused rather than given compute on one GPU and memory on another.
func ForContainer(dir string, annotations map[string]string) (*Container, error) {
	var recs []*Record
	for _, res := range []string{ResourceMemory, ResourceCores} {
		key := AnnotationKey(res)
		id, ok := annotations[key]
		if !ok {
			continue
		}
		r, err := Read(dir, id)
		if err != nil {
			return nil, fmt.Errorf("annotation %s=%q: %w", key, id, err)
		}
		if r.Resource != res {
			return nil, fmt.Errorf("annotation %s=%q: the record is an allocation of %s, not %s", key, id, r.Resource, res)
		}
		recs = append(recs, r)
	}
	if len(recs) == 0 {
		return nil, nil
	}
	a := &Container{UUID: recs[0].GPUUUID}
	var srcs []string
	for _, r := range recs {
		if r.GPUUUID != a.UUID {
			return nil, fmt.Errorf(`the container's %s units are on GPU %s and its %s units on GPU %s: vgpu limits memory and compute on one GPU per container, and the kubelet allocated these apart (no GPU had both free where the device plugin placed the first); on multi-GPU nodes use the DRA driver (vgpu.io claims), which places both on one GPU: docs/kubernetes-dra.md`, recs[0].Resource, a.UUID, r.Resource, r.GPUUUID)
		}
		srcs = append(srcs, fmt.Sprintf("allocation %s (%s: %d units on %s)", r.ID, r.Resource, r.Units, r.GPUUUID))
		switch r.Resource {
		case ResourceMemory:
			a.MemoryBytes = r.MemoryBytes
		case ResourceCores:
			a.ComputePercent = r.ComputePercent
		}
	}
	a.Source = strings.Join(srcs, ", ")
	return a, nil
}
