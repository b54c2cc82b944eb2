//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-dev/vgpu/internal/config"
	"github.com/vgpu-dev/vgpu/internal/contract"
)

// A priority through real runc: VGPU_PRIORITY=high puts the high word in
// the container's share file (a container that gives none gets 0, normal)
// and vgpu status shows it, in text and JSON; a bad value is refused with
// one error naming the variable, the value and the fix, and nothing is
// created. vgpu exec --priority takes the same values.
func TestPriorityThroughRuntime(t *testing.T) {
	need(t, "runc")
	requireRoot(t)
	e := newEnv(t, "priority")
	f := shared(t)
	cli := vgpuCLI(t)
	create := admissionCreate(t, e, f)
	word := func(id string) uint64 {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(e.stateDir, id, config.StateHost, contract.ShareFile))
		if err != nil {
			t.Fatal(err)
		}
		sf, ok := contract.DecodeShare(b)
		if !ok {
			t.Fatalf("%s: not a share file", id)
		}
		return sf.Order[0].Priority
	}
	if out, err := create("serve", "VGPU_PRIORITY=high", "VGPU_COMPUTE_REQUEST=30"); err != nil {
		t.Fatalf("create with VGPU_PRIORITY=high: %v\n%s", err, out)
	}
	if out, err := create("plain"); err != nil {
		t.Fatalf("create without a priority: %v\n%s", err, out)
	}
	if w := word("serve"); w != contract.PriorityHigh {
		t.Errorf("high container's priority word %d, want %d", w, contract.PriorityHigh)
	}
	if w := word("plain"); w != contract.PriorityNormal {
		t.Errorf("plain container's priority word %d, want %d", w, contract.PriorityNormal)
	}

	text := mustRun(t, 30*time.Second, e.vars(), cli, "status", "--state-dir", e.stateDir)
	if !regexp.MustCompile(`(?m)^ *0 .* 30%, priority high `).MatchString(text) || strings.Count(text, "priority") != 1 {
		t.Errorf("vgpu status does not show the high container's priority alone:\n%s", text)
	}
	js := mustRun(t, 30*time.Second, e.vars(), cli, "status", "--state-dir", e.stateDir, "--json")
	var rep struct {
		Containers []struct {
			ID      string `json:"id"`
			Devices []struct {
				Priority *string `json:"priority"`
			} `json:"devices"`
		} `json:"containers"`
	}
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		t.Fatalf("status --json: %v\n%s", err, js)
	}
	got := map[string]string{}
	for _, c := range rep.Containers {
		if p := c.Devices[0].Priority; p != nil {
			got[c.ID] = *p
		} else {
			got[c.ID] = "(none)"
		}
	}
	if got["serve"] != "high" || got["plain"] != "(none)" {
		t.Errorf("status --json priorities %v, want serve high and plain none", got)
	}

	out, err := create("bad", "VGPU_PRIORITY=urgent")
	if err == nil || !strings.Contains(out, `VGPU_PRIORITY="urgent": not a priority; use high, normal or low`) {
		t.Errorf("VGPU_PRIORITY=urgent: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(e.stateDir, "bad")); !os.IsNotExist(err) {
		t.Errorf("refused container has state: %v", err)
	}

	out, err = run(t, 30*time.Second, e.vars(), cli, "exec", "--devices", "0", "--priority", "top", "--", "true")
	if err == nil || !strings.Contains(out, `--priority="top": not a priority`) {
		t.Errorf("vgpu exec --priority top: %v\n%s", err, out)
	}
	if left := execEntries(t, e.stateDir); len(left) != 0 {
		t.Errorf("exec entries left: %v", left)
	}
}
