//go:build tools

// Package tools records the commands this module builds from its dependencies,
// so that go mod tidy keeps them.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "go.etcd.io/etcd/server/v3/embed"
)
