// execfloor is the least a runtime wrapper written in Go can cost: it starts
// (the Go runtime's own start, static, no cgo) and execs runc with its
// arguments, deciding nothing. bench/startlatency runs it beside runc and
// vgpu-runtime (-floor), so that vgpu-runtime's figure can be read against
// what starting any Go program costs on the machine at hand.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

func main() {
	rt, err := exec.LookPath("runc")
	if err == nil {
		err = syscall.Exec(rt, append([]string{rt}, os.Args[1:]...), os.Environ())
	}
	fmt.Fprintln(os.Stderr, "execfloor:", err)
	os.Exit(1)
}
