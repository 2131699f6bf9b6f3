package main

// The Kubernetes scenario: the kubernetes pool on a real kube-apiserver and kube-scheduler in
// a test process (adapters/kubernetes/kubecluster, a nested Go module). The measuring is
// TestBench there; this runs it and reports what it wrote.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// kubeResult is what the nested module's TestBench writes.
type kubeResult struct {
	Setup string     `json:"setup"`
	Rows  [][]string `json:"rows"` // metric, measured, target
	Notes []string   `json:"notes"`
}

func (b *bench) scenarioKubernetes() error {
	dir, err := os.MkdirTemp("", "gantry-bench-kube")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	out := filepath.Join(dir, "result.json")
	// A prebuilt test binary (-kube-test) runs where there is no Go toolchain (the GPU device).
	var cmd *exec.Cmd
	if b.o.kubeTest != "" {
		cmd = exec.Command(b.o.kubeTest, "-test.run=^TestBench$", "-test.count=1", "-test.timeout=30m", "-test.v")
	} else {
		cmd = exec.Command(b.o.goCmd, "test", "-count=1", "-run=^TestBench$", "-timeout=30m", "-v", ".")
		cmd.Dir = filepath.Join("adapters", "kubernetes", "kubecluster")
	}
	cmd.Env = append(os.Environ(), "GANTRY_KUBE_BENCH="+out, "GANTRY_KUBE_BENCH_WORKERS="+strconv.Itoa(b.o.kubeWorkers))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	logf("kubernetes: %s (the first build of kube-apiserver takes minutes)", cmd.String())
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("the Kubernetes benchmark (TestBench in adapters/kubernetes/kubecluster): %w", err)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		return err
	}
	var r kubeResult
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("reading the Kubernetes benchmark's figures: %w", err)
	}
	s := section{title: "Kubernetes pool: pods on a real API server and scheduler", noBare: true, gantryCol: "Measured", bareCol: "-",
		setup: r.Setup, notes: r.Notes}
	for _, row0 := range r.Rows {
		if len(row0) == 3 {
			s.rows = append(s.rows, row{row0[0], row0[1], "", row0[2], ""})
		}
	}
	b.sections = append(b.sections, s)
	return nil
}
