// Command gen writes lib/cudahook/include/vgpu_contract.h from
// internal/contract (go generate ./internal/contract; make generate).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/vgpu-dev/vgpu/internal/contract"
)

func main() {
	out := flag.String("o", contract.HeaderPath, "output file")
	flag.Parse()
	if err := os.WriteFile(*out, contract.Header(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
