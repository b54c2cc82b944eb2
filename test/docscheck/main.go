// docscheck is `make docs-check`: it fails when README.md or docs/*.md name a
// test no _test.go file declares (internal/docscheck/tests.go), or state
// a measured figure that docs/results.md does not hold (internal/docscheck
// has the rule), or list device nodes other than the ones vgpu-hook needs,
// or when docs/design.md's package map lacks a package or names one that
// does not exist (internal/docscheck/packages.go).
// Run from the repository root, or name the root.
package main

import (
	"fmt"
	"os"

	"github.com/vgpu-dev/vgpu/internal/discover"
	"github.com/vgpu-dev/vgpu/internal/docscheck"
)

func main() {
	root := "."
	if len(os.Args) > 2 {
		fmt.Fprintln(os.Stderr, "usage: docscheck [REPOSITORY-ROOT]")
		os.Exit(2)
	}
	if len(os.Args) == 2 {
		root = os.Args[1]
	}
	devs, err := docscheck.DeviceLists(root, discover.DeviceFlags(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, p := range devs {
		fmt.Fprintln(os.Stderr, p.Error())
	}
	probs, err := docscheck.Check(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, p := range probs {
		fmt.Fprintln(os.Stderr, p.Error())
	}
	missing, err := docscheck.CheckTests(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, m := range missing {
		fmt.Fprintln(os.Stderr, m.Error())
	}
	pkgs, err := docscheck.CheckPackageMap(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, p := range pkgs {
		fmt.Fprintln(os.Stderr, p.Error())
	}
	if len(pkgs) > 0 {
		fmt.Fprintf(os.Stderr, "docs-check: the package map in %s is not whole\n", docscheck.DesignPath)
	}
	if len(probs) > 0 {
		fmt.Fprintf(os.Stderr, "docs-check: %d measured figure(s) not in %s (the rule: docs/results.md, \"Measured figures and make docs-check\")\n", len(probs), docscheck.ResultsPath)
	}
	if len(missing) > 0 {
		fmt.Fprintf(os.Stderr, "docs-check: %d test(s) named by the docs do not exist\n", len(missing))
	}
	if len(probs) > 0 || len(missing) > 0 || len(pkgs) > 0 {
		os.Exit(1)
	}
	if len(devs) > 0 {
		os.Exit(1)
	}
}
