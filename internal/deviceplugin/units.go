package deviceplugin

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/vgpu-dev/vgpu/internal/discover"
	"github.com/vgpu-dev/vgpu/internal/grant"
)

// A unit is one device of the device-plugin API: "<GPU UUID>::<n>". The
// kubelet counts and hands out units; the plugin maps them back to a GPU.
const unitSep = "::"

func unitID(uuid string, n int) string { return uuid + unitSep + strconv.Itoa(n) }

// unitGPU returns the GPU UUID of a unit ID.
func unitGPU(id string) (string, error) {
	uuid, n, ok := strings.Cut(id, unitSep)
	if !ok || uuid == "" || n == "" {
		return "", fmt.Errorf("device ID %q is not a vgpu unit (<GPU UUID>::<n>)", id)
	}
	if _, err := strconv.Atoi(n); err != nil {
		return "", fmt.Errorf("device ID %q is not a vgpu unit (<GPU UUID>::<n>)", id)
	}
	return uuid, nil
}

// resource is one advertised resource and how a GPU splits into its units.
type resource struct {
	name string // grant.ResourceMemory or grant.ResourceCores
	// unitsOf is how many units a GPU offers.
	unitsOf func(g discover.GPU) int
	// fill completes a grant of n units.
	fill func(r *grant.Record, n int)
}

func memoryResource(unitBytes uint64) resource {
	return resource{
		name:    grant.ResourceMemory,
		unitsOf: func(g discover.GPU) int { return int(g.MemoryBytes / unitBytes) },
		fill:    func(r *grant.Record, n int) { r.MemoryBytes = uint64(n) * unitBytes },
	}
}

func coresResource() resource {
	return resource{
		name:    grant.ResourceCores,
		unitsOf: func(discover.GPU) int { return 100 },
		fill:    func(r *grant.Record, n int) { r.ComputePercent = n },
	}
}

// byGPU groups unit IDs by GPU UUID, keeping the IDs in order.
func byGPU(ids []string) (map[string][]string, error) {
	m := map[string][]string{}
	for _, id := range ids {
		uuid, err := unitGPU(id)
		if err != nil {
			return nil, err
		}
		m[uuid] = append(m[uuid], id)
	}
	return m, nil
}

// preferred picks size units from available, all on one GPU when any GPU
// has enough: the GPU of the must-include units if there are any, else the
// lowest-index GPU that fits (first fit, the same rule for memory and cores,
// so that a container's two resources land on the same GPU unless one of
// them is exhausted there). Without a GPU that fits, it returns nil and lets
// the kubelet choose (Allocate then refuses units that span GPUs).
func preferred(gpus []discover.GPU, available, mustInclude []string, size int) ([]string, error) {
	avail, err := byGPU(available)
	if err != nil {
		return nil, err
	}
	must, err := byGPU(mustInclude)
	if err != nil {
		return nil, err
	}
	order := make([]discover.GPU, len(gpus))
	copy(order, gpus)
	sort.SliceStable(order, func(i, j int) bool { return order[i].Index < order[j].Index })
	for _, g := range order {
		if len(must) > 1 || (len(must) == 1 && must[g.UUID] == nil) {
			continue
		}
		if len(avail[g.UUID]) < size {
			continue
		}
		picked := append([]string(nil), must[g.UUID]...)
		in := map[string]bool{}
		for _, id := range picked {
			in[id] = true
		}
		for _, id := range avail[g.UUID] {
			if len(picked) == size {
				break
			}
			if !in[id] {
				picked = append(picked, id)
			}
		}
		if len(picked) == size {
			return picked, nil
		}
	}
	return nil, nil
}
