package dra

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/discover"
)

// DriverName is the DRA driver's name: DeviceClass selectors, ResourceSlices
// and allocation results name it.
const DriverName = "vgpu.io"

// The consumable capacities of one GPU (KEP-5075): claims ask for them in
// spec.devices.requests[].exactly.capacity.requests.
const (
	CapacityMemory resourceapi.QualifiedName = "memory" // bytes of device memory
	CapacityCores  resourceapi.QualifiedName = "cores"  // percent of the GPU's compute; 100 = no limit
)

// The request policies: what a claim that leaves a capacity out takes, and
// how a request is rounded (up, by the scheduler, to a multiple of the step).
//
// A claim that names only memory takes DefaultCores cores (it is paced to
// 10 % of the GPU); one that names only cores takes DefaultMemory. So every
// allocation holds a stated share of both, and the scheduler's sums are what
// the node enforces.
var (
	DefaultMemory = resource.MustParse("1Gi")
	MinMemory     = resource.MustParse("256Mi") // below it the CUDA context alone does not fit
	MemoryStep    = resource.MustParse("1Mi")
	DefaultCores  = resource.MustParse("10")
	MinCores      = resource.MustParse("1")
	MaxCores      = resource.MustParse("100")
	CoresStep     = resource.MustParse("1")
)

// Device attributes (in the driver's domain: device.attributes["vgpu.io"].uuid in CEL).
const (
	AttrUUID    resourceapi.QualifiedName = "uuid"
	AttrIndex   resourceapi.QualifiedName = "index"
	AttrProduct resourceapi.QualifiedName = "product"
	AttrMemory  resourceapi.QualifiedName = "memory" // bytes, as an int (capacity "memory" is the consumable one)
)

// DeviceName is the ResourceSlice device of the host GPU with NVML index i.
func DeviceName(index int) string { return "gpu-" + strconv.Itoa(index) }

// deviceIndex parses DeviceName.
func deviceIndex(name string) (int, error) {
	s, ok := strings.CutPrefix(name, "gpu-")
	i, err := strconv.Atoi(s)
	if !ok || err != nil || i < 0 || DeviceName(i) != name {
		return 0, fmt.Errorf("device %q is not a vgpu.io device name (gpu-<index>)", name)
	}
	return i, nil
}

// Device is the ResourceSlice entry of one GPU: shareable
// (allowMultipleAllocations), with consumable memory and cores.
func Device(g discover.GPU) resourceapi.Device {
	mem := resource.NewQuantity(int64(g.MemoryBytes), resource.BinarySI)
	defMem := DefaultMemory.DeepCopy()
	if defMem.Cmp(*mem) > 0 {
		defMem = mem.DeepCopy()
	}
	minMem := MinMemory.DeepCopy()
	if minMem.Cmp(defMem) > 0 {
		minMem = defMem.DeepCopy()
	}
	return resourceapi.Device{
		Name:                     DeviceName(g.Index),
		AllowMultipleAllocations: ptr.To(true),
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			AttrUUID:    {StringValue: ptr.To(g.UUID)},
			AttrIndex:   {IntValue: ptr.To(int64(g.Index))},
			AttrProduct: {StringValue: ptr.To(g.Name)},
			AttrMemory:  {IntValue: ptr.To(int64(g.MemoryBytes))},
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			CapacityMemory: {Value: *mem, RequestPolicy: &resourceapi.CapacityRequestPolicy{
				Default:    &defMem,
				ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: &minMem, Max: ptr.To(mem.DeepCopy()), Step: ptr.To(MemoryStep.DeepCopy())},
			}},
			CapacityCores: {Value: MaxCores.DeepCopy(), RequestPolicy: &resourceapi.CapacityRequestPolicy{
				Default:    ptr.To(DefaultCores.DeepCopy()),
				ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(MinCores.DeepCopy()), Max: ptr.To(MaxCores.DeepCopy()), Step: ptr.To(CoresStep.DeepCopy())},
			}},
		},
	}
}

// Ordered returns gpus in the order the placement policy prefers them, given
// the memory (bytes) and cores the node's claims commit of each (by UUID).
// The scheduler's allocator goes through a slice's devices in order and
// takes the first with enough memory and cores left (first fit), so the
// order is the policy: binpack lists the fullest GPU first, spread the
// emptiest; fullness is the used fraction of memory plus that of cores.
// Ties keep NVML order.
func Ordered(gpus []discover.GPU, mem map[string]uint64, cores map[string]int, policy string) []discover.GPU {
	usage := func(g discover.GPU) float64 {
		u := float64(cores[g.UUID]) / float64(MaxCores.Value())
		if g.MemoryBytes > 0 {
			u += float64(mem[g.UUID]) / float64(g.MemoryBytes)
		}
		return u
	}
	out := append([]discover.GPU(nil), gpus...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := usage(out[i]), usage(out[j])
		if a == b {
			return false
		}
		if policy == config.PlacementSpread {
			return a < b
		}
		return a > b
	})
	return out
}

// Resources is what the node publishes: one pool named after the node, one
// slice, one device per GPU in the order of gpus (Ordered).
func Resources(nodeName string, gpus []discover.GPU) resourceslice.DriverResources {
	devs := make([]resourceapi.Device, 0, len(gpus))
	for _, g := range gpus {
		devs = append(devs, Device(g))
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		nodeName: {Slices: []resourceslice.Slice{{Devices: devs}}},
	}}
}
