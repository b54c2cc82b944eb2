package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/contract"
	"github.com/vgpu-dev/vgpu/internal/quota"
	"github.com/vgpu-dev/vgpu/internal/tenant"
)

// InfoVersion is the version of container.json this release writes:
//
//   - 0 (no "version" member, release 0.1.0) and 1: who the container is
//     and its limits; the phases and the library's settings are in the
//     quota file alone, and Read takes them (and the limits) from there;
//   - 2: the whole record; the quota file is rendered from it
//     (quota.Render) and never read back.
const InfoVersion = 2

// The container record is tenant.Record: the one description of a
// container on the host. The plan gives it (plan.Plan.Record), Create
// assigns its slots and writes it together with the quota file rendered
// from it (quota.Render), and every reader takes it from Read or List.

// Read reads the record of one container.
func Read(stateDir, id string) (*tenant.Record, error) {
	if err := ValidID(id); err != nil {
		return nil, err
	}
	dir := filepath.Join(stateDir, id)
	info, err := readInfo(dir)
	if err != nil {
		return nil, err
	}
	if info.Version >= 2 {
		return info, nil
	}
	qd, err := os.ReadFile(filepath.Join(dir, config.StateQuota))
	if err != nil {
		return nil, err
	}
	q, err := quota.Parse(qd)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, config.StateQuota), err)
	}
	upgrade(info, q)
	return info, nil
}

// readInfo parses container.json as it is on disk (no upgrade).
func readInfo(dir string) (*tenant.Record, error) {
	data, err := os.ReadFile(filepath.Join(dir, config.StateInfo))
	if err != nil {
		return nil, err
	}
	info, err := parseInfo(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, config.StateInfo), err)
	}
	return info, nil
}

// parseInfo reads container.json of any release up to InfoVersion. The
// first release (no version) left compute out for "no limit"; it is read as
// contract.ComputeUnlimited, the one form of "no limit".
func parseInfo(data []byte) (*tenant.Record, error) {
	var info tenant.Record
	if err := json.Unmarshal(data, &info); err != nil {
		return nil, err
	}
	if info.Version > InfoVersion {
		return nil, fmt.Errorf("container.json version %d is newer than this vgpu reads (%d): upgrade vgpu", info.Version, InfoVersion)
	}
	for i := range info.Devices {
		if info.Devices[i].Compute == 0 {
			info.Devices[i].Compute = contract.ComputeUnlimited
		}
	}
	return &info, nil
}

// upgrade completes a record of version 0 or 1 from its quota file, which
// is what its library enforces: the library's settings and each device's
// limits, requests and phase; container.json adds which GPU each is.
func upgrade(r *tenant.Record, q *quota.File) {
	r.Library = q.Library()
	gpus := map[int]tenant.GPU{}
	for _, d := range r.Devices {
		gpus[d.Index] = d.GPU
	}
	r.Devices = make([]tenant.Device, 0, len(q.Devices))
	for _, d := range q.Devices {
		g, ok := gpus[d.Index]
		if !ok || !strings.EqualFold(g.UUID, d.GPU.UUID) {
			g = tenant.GPU{Index: -1, UUID: d.GPU.UUID}
		}
		d.GPU = g
		r.Devices = append(r.Devices, d)
	}
}

// FromQuota is the record of container id that quota file q describes,
// with the GPUs known by their UUIDs alone: what Read makes of a record of
// version 0 or 1 that names no devices, and a test's way to a record.
func FromQuota(id string, q *quota.File) tenant.Record {
	r := tenant.Record{ID: id}
	upgrade(&r, q)
	return r
}

// Entry is one container of List: its record, or why it cannot be read.
type Entry struct {
	ID   string
	Info *tenant.Record // nil when Err
	Err  error
}

// List reads every container of the state directory, in the order of their
// ids. It passes over what is not a container: dot files (the lock, caches)
// and the temp and half-removed directories of Create and Remove. A missing
// directory has no containers.
func List(stateDir string) ([]Entry, error) {
	ents, err := os.ReadDir(stateDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, e := range ents {
		id := e.Name()
		if strings.HasPrefix(id, ".") || !e.IsDir() || ValidID(id) != nil {
			continue
		}
		info, err := Read(stateDir, id)
		out = append(out, Entry{ID: id, Info: info, Err: err})
	}
	return out, nil
}
