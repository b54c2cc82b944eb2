//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The Grafana dashboard (configs/grafana/vgpu.json) against a real
// Prometheus scraping `vgpu node` on the simulated GPU, with two busy
// containers: an honest one the library paces to its 50 %, and a compute
// bypass under 25 % that the node throttles. Every query of every panel,
// the GPU variable's and the enforcement annotation's, asked as Grafana
// asks them (a range query, the variables filled in), returns series.

type grafanaDashboard struct {
	Panels      []grafanaPanel `json:"panels"`
	Annotations struct {
		List []struct {
			Name string `json:"name"`
			Expr string `json:"expr"`
		} `json:"list"`
	} `json:"annotations"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

type grafanaPanel struct {
	Title   string         `json:"title"`
	Type    string         `json:"type"`
	Panels  []grafanaPanel `json:"panels"` // a collapsed row's
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

// promQuery asks Prometheus's HTTP API; it returns the result's series.
func promQuery(t *testing.T, base, path string, q url.Values) []json.RawMessage {
	t.Helper()
	resp, err := http.Get(base + path + "?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("%s %v: %v", path, q, err)
	}
	if r.Status != "success" {
		t.Fatalf("Prometheus %s %s: %s", path, q.Get("query"), r.Error)
	}
	return r.Data.Result
}

func startPrometheus(t *testing.T, dir, target string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := filepath.Join(dir, "prometheus.yml")
	writeFile(t, cfg, []byte(fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: vgpu-node\n    static_configs:\n      - targets: [%q]\n", target)), 0o644)
	logPath := filepath.Join(dir, "prometheus.log")
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("prometheus", "--config.file", cfg, "--storage.tsdb.path", filepath.Join(dir, "tsdb"),
		"--web.listen-address", addr, "--log.level", "warn")
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		lf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("prometheus log:\n%s", b)
		}
	})
	base := "http://" + addr
	if err := pollAt(60*time.Second, 200*time.Millisecond, func() error {
		resp, err := http.Get(base + "/-/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return holds(resp.StatusCode == http.StatusOK, "/-/ready: %s", resp.Status)
	}); err != nil {
		b, _ := os.ReadFile(logPath)
		t.Fatalf("prometheus not ready: %v\n%s", err, b)
	}
	return base
}

func TestGrafanaDashboardPanelsHaveData(t *testing.T) {
	f := shared(t)
	need(t, "runc", "gcc", "prometheus")
	addAttacker(t, f)
	var dash grafanaDashboard
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "configs", "grafana", "vgpu.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("configs/grafana/vgpu.json: %v", err)
	}
	e := newEnv(t, "grafana")
	mkStateDir(t, e)
	cli := vgpuCLI(t)
	rt := e.runc(t)
	metricsURL, _ := startNode(t, e)
	u, err := url.Parse(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	prom := startPrometheus(t, e.dir, u.Host)
	start := time.Now()
	for _, c := range []struct{ id, cmd, compute string }{
		{"honest", "vgpu-attack busy 0", "50"},
		{"bypass", "vgpu-attack compute 0", "25"},
	} {
		bd := makeBundle(t, filepath.Join(e.dir, "bundle-"+c.id), f.rootfs, []string{"/bin/sh", "-c", c.cmd},
			[]string{"VGPU_COMPUTE_LIMIT=" + c.compute, "VGPU_MEMORY_LIMIT=1Gi", "VGPU_VISIBLE_DEVICES=0"}, nil)
		rt.detach(bd, c.id)
	}
	// The bypass throttled: every panel has something to show.
	if err := pollAt(120*time.Second, 500*time.Millisecond, func() error {
		frozen := false
		if c := container(vgpuStatus(t, cli, e.stateDir), "bypass"); c != nil {
			for _, ev := range c.Enforcement {
				frozen = frozen || ev.Kind == "freeze"
			}
		}
		return holds(frozen, "not frozen")
	}); err != nil {
		t.Fatalf("compute bypass: %v:\n%s", err, statusText(cli, e.stateDir))
	}

	// The GPU variable: label_values(metric, label).
	var gpus []string
	for _, v := range dash.Templating.List {
		if v.Name != "gpu" {
			continue
		}
		metric, label, ok := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(v.Definition, "label_values("), ")"), ",")
		if !ok {
			t.Fatalf("variable gpu: %q is not label_values(metric, label)", v.Definition)
		}
		resp, err := http.Get(prom + "/api/v1/label/" + strings.TrimSpace(label) + "/values?" + url.Values{"match[]": {metric}}.Encode())
		if err != nil {
			t.Fatal(err)
		}
		var r struct{ Data []string }
		err = json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		gpus = r.Data
	}
	if len(gpus) != 1 {
		t.Fatalf("the GPU variable gives %v, want the simulated GPU's UUID", gpus)
	}
	fill := func(expr string) string {
		return strings.NewReplacer("$gpu", gpus[0], "$__rate_interval", "15s", "$__interval", "1s").Replace(expr)
	}
	rng := func(expr string) []json.RawMessage {
		now := time.Now()
		return promQuery(t, prom, "/api/v1/query_range", url.Values{"query": {fill(expr)},
			"start": {fmt.Sprint(start.Unix())}, "end": {fmt.Sprint(now.Unix())}, "step": {"1"}})
	}
	type query struct{ what, expr string }
	var queries []query
	var all []grafanaPanel
	for _, p := range dash.Panels {
		all = append(all, p)
		all = append(all, p.Panels...)
	}
	for _, p := range all {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			queries = append(queries, query{fmt.Sprintf("panel %q query %s", p.Title, tg.RefID), tg.Expr})
		}
	}
	for _, a := range dash.Annotations.List {
		if a.Expr != "" {
			queries = append(queries, query{fmt.Sprintf("annotation %q", a.Name), a.Expr})
		}
	}
	n := len(queries)
	// Until Prometheus has scraped the throttle (1 s apart, and a
	// loaded machine delays scrapes by seconds) some panels are empty:
	// wait for every query to return series, then report those that
	// never did.
	var empty []string
	if err := pollAt(120*time.Second, time.Second, func() error {
		empty = empty[:0]
		for _, q := range queries {
			if got := rng(q.expr); len(got) == 0 {
				empty = append(empty, q.what+" returns no series: "+fill(q.expr))
			}
		}
		return holds(len(empty) == 0, "%d of %d queries return no series", len(empty), n)
	}); err != nil {
		for _, m := range empty {
			t.Error(m)
		}
	}

	// vgpu top shows the same: the GPU's totals, the node's figures for the
	// bypass (its throttle's duty: none or frozen N%, as the duty cycle
	// stands at that instant) and its throttle among the events. vgpu top
	// and vgpu status show a container's last five events: no event the
	// node invents (a region-ignored of a region the library writes, as
	// when the round's read of it overlapped the order loop's) may push
	// the throttle out.
	top, err := exec.Command(cli, "top", "--once", "--state-dir", e.stateDir).CombinedOutput()
	if err != nil || !strings.Contains(string(top), "host enforcement: on") || !strings.Contains(string(top), "memory [") ||
		!regexp.MustCompile(`(?m)^  bypass .* / 25% .*(none|frozen [0-9]+%) +[0-9]+$`).Match(top) ||
		!regexp.MustCompile(`(?m)^  [0-9:]+  bypass +throttled \(cgroup freezer\)`).Match(top) {
		t.Errorf("vgpu top --once (%v): want host enforcement on, the GPU's memory bar, the bypass's throttle duty and its throttle event:\n%s", err, top)
	}
	t.Logf("vgpu top --once:\n%s", top)
	for _, id := range []string{"honest", "bypass"} {
		if c := container(vgpuStatus(t, cli, e.stateDir), id); c != nil {
			for _, ev := range c.Enforcement {
				if ev.Kind == "region-ignored" {
					t.Errorf("%s: its library writes its region, yet %+v", id, ev)
				}
			}
		}
	}
	if n < 10 {
		t.Errorf("only %d queries in the dashboard", n)
	}
}
