// Command nvml-info is a go-nvml client, like any monitoring agent: the e2e
// tests run it inside limited containers. It prints key=value lines.
package main

import (
	"fmt"
	"os"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func main() {
	lib := nvml.New() // dlopen("libnvidia-ml.so.1"): the preloaded stand-in answers
	if r := lib.Init(); r != nvml.SUCCESS {
		fmt.Printf("nvml_init=%d\n", r)
		os.Exit(1)
	}
	defer func() { _ = lib.Shutdown() }() // the program ends here: nothing to do with its error
	n, r := lib.DeviceGetCount()
	fmt.Printf("nvml_count=%d\nnvml_count_rc=%d\n", n, r)
	for i := 0; i < n; i++ {
		d, r := lib.DeviceGetHandleByIndex(i)
		if r != nvml.SUCCESS {
			fmt.Printf("nvml_handle%d=%d\n", i, r)
			continue
		}
		uuid, _ := d.GetUUID()
		mem, r := d.GetMemoryInfo()
		fmt.Printf("nvml_uuid%d=%s\nnvml_total%d=%d\nnvml_used%d=%d\nnvml_mem_rc%d=%d\n", i, uuid, i, mem.Total, i, mem.Used, i, r)
		idx, r := d.GetIndex()
		minor, r2 := d.GetMinorNumber()
		fmt.Printf("nvml_index%d=%d\nnvml_index_rc%d=%d\nnvml_minor%d=%d\nnvml_minor_rc%d=%d\n", i, idx, i, r, i, minor, i, r2)
	}
	// arguments: UUIDs to look up (nvmlDeviceGetHandleByUUID), printed as
	// nvml_byuuid_<UUID>=<rc>
	for _, u := range os.Args[1:] {
		_, r := lib.DeviceGetHandleByUUID(u)
		fmt.Printf("nvml_byuuid_%s=%d\n", u, r)
	}
}
