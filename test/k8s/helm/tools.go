//go:build tools

// Package tools pins the Helm CLI that build.sh builds for the chart's tests
// (its own module, so that Helm's k8s.io versions never meet the vgpu
// module's).
package tools

import _ "helm.sh/helm/v4/cmd/helm"
