//go:build e2e && k8s

// What the scheduler has seen, through what any API client can do: it logs
// no ResourceSlice events and no API shows which slice version it holds.
package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// barrierDriver names the devices of the barrier slices: only the
	// barrier class selects them, only probe pods ask for that class.
	barrierDriver = "barrier.e2e.vgpu.io"
	barrierClass  = "e2e-scheduler-barrier"
	// barrierNode is a Node object no kubelet runs: the barrier slices'
	// node, so that a probe pod is bound and nothing ever starts it. Its
	// taint keeps off any pod that does not tolerate everything; those that
	// do find no device of theirs on it.
	barrierNode = "vgpu-e2e-barrier"
	barrierNS   = "kube-system" // out of the tests' pod and Event lists
)

// schedulerNode adds a Node without a kubelet, tainted NoSchedule.
func (de *draEnv) schedulerNode(t *testing.T, name string) {
	t.Helper()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "vgpu.io/e2e-no-kubelet", Effect: corev1.TaintEffectNoSchedule}}},
		// Room for pods, as a kubelet would report: without it, "Too many pods".
		Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{corev1.ResourcePods: apiresource.MustParse("10")},
			Allocatable: corev1.ResourceList{corev1.ResourcePods: apiresource.MustParse("10")},
		},
	}
	if _, err := de.cp.client.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// waitSchedulerSlices returns once the scheduler has seen every
// ResourceSlice write that the API server had when it was called. It writes
// a barrier slice, then waits for the scheduler to bind a probe pod whose
// claim only the barrier's device satisfies. The scheduler's slices come
// down one watch of all ResourceSlices, applied to its cache in the order
// written (its resourceslice tracker forwards them in order), and each
// scheduling cycle lists that cache: the cycle that allocated the barrier's
// device saw every slice written before it. Probe, claim and slice are
// deleted after; the barrier node stays.
func (de *draEnv) waitSchedulerSlices(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	c := de.cp.client
	de.schedulerNode(t, barrierNode)
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: barrierClass},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", barrierDriver)},
		}}},
	}
	if _, err := c.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	de.barriers++
	name := fmt.Sprintf("e2e-scheduler-barrier-%d", de.barriers)
	token := name // unique in the cluster: an earlier barrier the scheduler still holds cannot serve
	node := barrierNode
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: barrierDriver, NodeName: &node,
			Pool: resourceapi.ResourcePool{Name: name, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{Name: "barrier", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"token": {StringValue: &token},
			}}},
		},
	}
	if _, err := c.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: barrierNS},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "barrier",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: barrierClass, Selectors: []resourceapi.DeviceSelector{{
				CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.attributes[%q].token == %q", barrierDriver, token)},
			}}},
		}}}},
	}
	if _, err := c.ResourceV1().ResourceClaims(barrierNS).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: barrierNS},
		Spec: corev1.PodSpec{
			Tolerations:    []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "barrier", ResourceClaimName: &name}},
			Containers: []corev1.Container{{
				Name: "probe", Image: k8sImage, ImagePullPolicy: corev1.PullNever,
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "barrier"}}},
			}},
		},
	}
	if _, err := c.CoreV1().Pods(barrierNS).Create(ctx, probe, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, de.k, de.cp, 3*time.Minute, "the scheduler binding probe pod "+name+" (it has seen the slices written before)", func() error {
		p, err := c.CoreV1().Pods(barrierNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Spec.NodeName != barrierNode {
			return fmt.Errorf("on node %q, conditions %+v", p.Spec.NodeName, p.Status.Conditions)
		}
		return nil
	})
	// No kubelet will confirm the probe's end: delete it at once.
	if err := c.CoreV1().Pods(barrierNS).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	if err := c.ResourceV1().ResourceClaims(barrierNS).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.ResourceV1().ResourceSlices().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// retryUnschedulable adds a Node without a kubelet: an event on which the
// scheduler retries each pod the DynamicResources plugin left unschedulable.
// It returns the start of the message that a retry writes into a pod's
// PodScheduled condition, "0/N nodes are available" with N counting the new
// node (no node is removed meanwhile), so that a message with it comes from
// a scheduling cycle that began after the node was added.
func (de *draEnv) retryUnschedulable(t *testing.T, name string) string {
	t.Helper()
	de.schedulerNode(t, name)
	l, err := de.cp.client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("0/%d nodes are available", len(l.Items))
}
