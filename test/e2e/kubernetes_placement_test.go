//go:build k8s

// Multi-GPU nodes under the real kubelet: the device plugin keeps each
// container's memory and cores on one GPU and places by
// kubernetes.placement (binpack, spread).
package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/test/simgpu/simroot"
)

// placementPods is a fixed sequence of 20 pods of mixed sizes (vgpu.io/memory
// in GiB, vgpu.io/cores in percent) that fits two 16 GiB GPUs: 27 GiB and
// 180 cores in all. The same as internal/deviceplugin's placementSequence,
// which runs it through the kubelet's calls with either resource first.
var placementPods = [][2]int{
	{4, 25}, {1, 5}, {2, 15}, {1, 10}, {2, 10}, {1, 20}, {2, 5}, {1, 10}, {2, 15}, {1, 5},
	{1, 10}, {1, 5}, {1, 10}, {2, 5}, {1, 5}, {1, 5}, {1, 5}, {1, 10}, {1, 5}, {1, 5},
}

// holdPod writes a static pod that prints its quota and keeps its units.
func (k *kube) holdPod(t *testing.T, name string, mem, cores int) {
	t.Helper()
	y := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: default
spec:
  hostNetwork: true
  restartPolicy: Never
  containers:
    - name: main
      image: %s
      imagePullPolicy: Never
      command: ["/bin/sh", "-c", "cat /run/vgpu/quota; exec sleep 3600"]
      resources:
        limits:
          vgpu.io/memory: "%d"
          vgpu.io/cores: "%d"
`, name, k8sImage, mem, cores)
	if err := os.WriteFile(filepath.Join(k.manifests, name+".yaml"), []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
}

// quotaLine returns the pod's "device 0 …" quota line once its log has it.
func (k *kube) quotaLine(name string) string {
	logs, _ := filepath.Glob(filepath.Join(k.logs, "default_"+name+"-*", "main", "*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.SplitN(line, " ", 4); len(f) == 4 && strings.HasPrefix(f[3], "device 0 ") {
				return f[3]
			}
		}
	}
	return ""
}

var quotaRE = regexp.MustCompile(`^device 0 (GPU-\S+) memory=(\d+) compute=(\d+)`)

func TestKubernetesDevicePluginPlacement(t *testing.T) {
	for _, tc := range []struct {
		gpus   int
		policy string
	}{{2, "binpack"}, {4, "spread"}} {
		t.Run(fmt.Sprintf("%dgpus-%s", tc.gpus, tc.policy), func(t *testing.T) {
			k := startKubeGPUs(t, tc.gpus, tc.policy)
			pluginLog := filepath.Join(k.dir, "device-plugin.log")
			grants := func() int {
				b, _ := os.ReadFile(pluginLog)
				return strings.Count(string(b), "msg=granted")
			}
			// One pod at a time through admission (both its grants
			// written), so that each is placed knowing the ones before.
			for i, p := range placementPods {
				k.holdPod(t, fmt.Sprintf("place-%02d", i), p[0], p[1])
				deadline := time.Now().Add(podWaitLimit)
				for grants() < 2*(i+1) {
					if time.Now().After(deadline) {
						k.dumpLogs(t)
						t.Fatalf("pod %d: %d grants in %v, want %d", i, grants(), podWaitLimit, 2*(i+1))
					}
					time.Sleep(200 * time.Millisecond)
				}
			}
			// Every pod runs (vgpu-runtime refuses a container whose memory
			// and cores are on two GPUs) with its limits on one GPU.
			index := map[string]int{}
			for g := 0; g < tc.gpus; g++ {
				index[simroot.DefaultUUID(g)] = g
			}
			at := make([]int, len(placementPods))
			deadline := time.Now().Add(podWaitLimit)
			for i, p := range placementPods {
				name := fmt.Sprintf("place-%02d", i)
				line := k.quotaLine(name)
				for line == "" && time.Now().Before(deadline) {
					time.Sleep(time.Second)
					line = k.quotaLine(name)
				}
				m := quotaRE.FindStringSubmatch(line)
				if m == nil {
					b, _ := os.ReadFile(k.kubelet.log)
					var refused []string
					for _, l := range strings.Split(string(b), "\n") {
						if strings.Contains(l, name) && strings.Contains(l, "units are on GPU") {
							refused = append(refused, l)
						}
					}
					k.dumpLogs(t)
					t.Fatalf("pod %s (%d GiB, %d cores) did not run with a quota (%q); the kubelet on it: %v", name, p[0], p[1], line, refused)
				}
				g, ok := index[m[1]]
				if !ok || m[2] != strconv.Itoa(p[0]<<30) || m[3] != strconv.Itoa(p[1]) {
					t.Fatalf("pod %s: quota %q, want memory=%d compute=%d on one of this node's GPUs", name, line, p[0]<<30, p[1])
				}
				at[i] = g
			}
			// Replayed in admission order: the policy's promise for each pod.
			load := make([]placeLoad, tc.gpus)
			for i, p := range placementPods {
				g := at[i]
				for j, l := range load {
					if j == g || l.mem+p[0] > 16 || l.cores+p[1] > 100 {
						continue // no room for this pod
					}
					if tc.policy == "binpack" && load[g].pods == 0 && l.pods > 0 {
						t.Errorf("binpack: pod %d (%d GiB, %d cores) opened empty GPU %d while GPU %d (%+v) had room", i, p[0], p[1], g, j, l)
					}
					if tc.policy == "spread" && load[g].pods > 0 && l.pods == 0 {
						t.Errorf("spread: pod %d (%d GiB, %d cores) went to used GPU %d (%+v) while GPU %d was empty", i, p[0], p[1], g, load[g], j)
					}
				}
				load[g].mem += p[0]
				load[g].cores += p[1]
				load[g].pods++
			}
			t.Logf("%s on %d GPUs: pods on GPUs %v; per GPU %+v", tc.policy, tc.gpus, at, load)
			used := 0
			for _, l := range load {
				if l.pods > 0 {
					used++
				}
			}
			switch tc.policy {
			case "binpack":
				if load[0].mem < 14 {
					t.Errorf("binpack: GPU 0 holds %d GiB, %d cores: it was not filled first", load[0].mem, load[0].cores)
				}
			case "spread":
				if used != tc.gpus {
					t.Errorf("spread: %d of %d GPUs used", used, tc.gpus)
				}
			}
		})
	}
}

type placeLoad struct{ mem, cores, pods int }
