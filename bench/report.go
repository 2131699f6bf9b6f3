package main

import (
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"
)

// machine describes where the figures were taken.
type machine struct {
	cpus                                int
	cpuModel, memory, kernel, goVersion string
	wrkVersion                          string
	commit                              string // the Gantry source measured
}

func describeMachine(goCmd string) machine {
	m := machine{cpus: runtime.NumCPU(), cpuModel: "unknown", memory: "unknown", kernel: "unknown"}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.cpuModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				var kb float64
				_, _ = fmt.Sscan(f[1], &kb)
				m.memory = fmt.Sprintf("%.1f GiB", kb/(1<<20))
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.kernel = strings.TrimSpace(string(b))
	}
	if out, err := exec.Command(goCmd, "version").Output(); err == nil {
		m.goVersion = strings.TrimSpace(string(out))
	} else {
		m.goVersion = runtime.Version()
	}
	if out, _ := exec.Command("wrk", "--version").CombinedOutput(); len(out) > 0 {
		m.wrkVersion, _, _ = strings.Cut(strings.TrimSpace(string(out)), "\n")
		m.wrkVersion, _, _ = strings.Cut(m.wrkVersion, " Copyright")
	}
	m.commit = describeSource()
	return m
}

// describeSource names the commit measured and any other changes in the working tree (the bench
// runs on whatever is checked out, and other work may be in progress).
func describeSource() string {
	head, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown (not a git checkout)"
	}
	desc := "commit " + strings.TrimSpace(string(head))
	out, _ := exec.Command("git", "status", "--porcelain", "--", ".",
		":(exclude)bench", ":(exclude)BENCHMARKS.md", ":(exclude)Makefile").Output()
	var changed []string
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if len(line) > 3 {
			changed = append(changed, line[3:])
		}
	}
	if len(changed) > 0 {
		shown := changed[:min(len(changed), 8)]
		desc += fmt.Sprintf(" plus %d uncommitted or untracked path(s) in the working tree (%s", len(changed), strings.Join(shown, ", "))
		if len(changed) > len(shown) {
			desc += ", ..."
		}
		desc += ")"
	}
	return desc
}

// markdown renders the whole report.
func (b *bench) markdown() string {
	var w strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&w, format, args...) }
	p("# Gantry benchmark results\n\n")
	p("- Date: %s (took %v)\n", b.started.UTC().Format("2006-01-02 15:04 MST"), time.Since(b.started).Round(time.Second))
	p("- Command: `%s`\n", strings.Join(append([]string{"go run ./bench"}, os.Args[1:]...), " "))
	p("- Machine: %d CPUs (%s), %s memory, Linux %s\n", b.machine.cpus, b.machine.cpuModel, b.machine.memory, b.machine.kernel)
	p("- Source: %s\n", b.machine.commit)
	p("- Toolchain: %s; load: %s and Go clients in this process; everything on 127.0.0.1\n", b.machine.goVersion, b.machine.wrkVersion)
	p("- Gantry: `gantry serve --listen 127.0.0.1:0 --data <fresh dir> --quota-minute 0 --quota-hour 0 --quota-day 0`, one fresh server per scenario\n\n")
	for _, f := range b.failures {
		p("**%s**\n\n", f)
	}
	for _, s := range b.sections {
		p("## %s\n\n%s\n\n", s.title, s.setup)
		gantryCol, bareCol := cmp.Or(s.gantryCol, "Gantry"), cmp.Or(s.bareCol, "Bare net/http")
		if s.noBare {
			p("| Figure | %s | Target | Verdict |\n|---|---|---|---|\n", gantryCol)
		} else {
			p("| Figure | %s | %s | Target | Verdict |\n|---|---|---|---|---|\n", gantryCol, bareCol)
		}
		for _, r := range s.rows {
			if s.noBare {
				p("| %s | %s | %s | %s |\n", r.metric, r.gantry, r.target, r.verdict)
				continue
			}
			p("| %s | %s | %s | %s | %s |\n", r.metric, r.gantry, r.bare, r.target, r.verdict)
		}
		p("\n")
		for _, n := range s.notes {
			p("%s\n\n", n)
		}
	}
	if len(b.missed) == 0 && len(b.sections) > 0 {
		p("Every target measured was met.\n\n")
	} else if len(b.missed) > 0 {
		p("Targets missed in: %s.\n\n", strings.Join(b.missed, ", "))
	}
	for _, pr := range b.profiles {
		p("## Profile: %s\n\n%s\n\n", pr.scenario, pr.how)
		if pr.err != "" {
			p("Profiling failed: %s\n\n", pr.err)
		}
		if pr.bench != "" {
			p("```\n%s\n```\n\n", strings.TrimSpace(pr.bench))
		}
		for _, t := range pr.tops {
			p("`%s`\n\n```\n%s\n```\n\n", t.cmd, strings.TrimSpace(t.out))
		}
	}
	if len(b.raw) > 0 {
		p("<details><summary>wrk output</summary>\n\n```\n%s\n```\n\n</details>\n", strings.TrimSpace(strings.Join(b.raw, "\n")))
	}
	return w.String()
}

// --- profiles --------------------------------------------------------------------------------

type profileResult struct {
	scenario, how, bench, err string
	tops                      []profileTop
}

type profileTop struct{ cmd, out string }

// profileSpec names the in-process benchmark that reproduces a figure, and the kind of
// profile to take.
type profileSpec struct {
	bench string
	heap  bool
	args  []string
	how   string     // what the benchmark runs
	tops  [][]string // the pprof views to show; nil = the job path's
}

const engineHow = "in process: api.New + core.Jobs + store/memq over Pebble + scheduler.Scheduler behind httptest, echo workers as goroutines; see bench/engine_test.go"
const simHow = "in process: the scheduler simulation of bench/sim.go; see bench/sim_test.go"

// profiles maps a scenario to its profile.
var profiles = map[string]profileSpec{
	"run":     {bench: "BenchmarkRun", args: []string{"-benchtime", "5s"}, how: engineHow},
	"runsync": {bench: "BenchmarkRunSync", args: []string{"-benchtime", "3000x", "-count", "2"}, how: engineHow},
	"e2e":     {bench: "BenchmarkE2E", args: []string{"-benchtime", "20000x", "-count", "2"}, how: engineHow},
	"memory":  {bench: "BenchmarkQueuedMemory", heap: true, args: []string{"-benchtime", "1x"}, how: engineHow},
	"lb": {bench: "BenchmarkLBProxy", args: []string{"-benchtime", "5s"},
		how: "in process: the engine of bench/engine_test.go with scheduler.Scheduler as the Balancer, one gantry/http-echo worker run in the same process on a loopback port (so the profile holds the proxy, the worker and the 64 clients); see bench/lb_test.go",
		tops: [][]string{{"-top", "-nodecount=20"}, {"-top", "-cum", "-nodecount=45"},
			{"-top", "-cum", "-nodecount=30", "-show=gantryhq/gantry/(api|core|scheduler|store)|net/http/httputil|net/http\\.\\(\\*(Transport|persistConn|response|chunkWriter)\\)|probeRequestBody", "-hide=gantry/bench\\."}}},
}

// schedProfiles are the scheduler scenario's figures that have an in-process benchmark, by
// the key reportScheduler records a miss under.
var schedProfiles = map[string]profileSpec{
	"place": {bench: "BenchmarkPlacement", args: []string{"-cpu", "2", "-benchtime", "3s"}, how: simHow},
	"warm":  {bench: "BenchmarkWarmTake", args: []string{"-cpu", "2", "-benchtime", "20000x"}, how: simHow},
}

// profileMisses runs the in-process benchmark of each missed scenario under a profiler. The
// scheduler scenario's tick is read from the CPU profile its load phase took.
func (b *bench) profileMisses() {
	for _, sc := range b.missed {
		if sc == "scheduler" {
			b.profileScheduler()
			continue
		}
		if pf, ok := profiles[sc]; ok {
			b.profileBench(sc, sc, pf)
		}
	}
}

// profileScheduler adds the tick's share of the load phase's CPU profile when the tick missed
// its target, and profiles the in-process benchmark of any other missed figure.
func (b *bench) profileScheduler() {
	if b.schedMissed["tick"] && b.schedProfile != "" {
		pr := profileResult{scenario: "scheduler: the autoscaler tick under load",
			how: "The CPU profile of the simulation's whole load phase (pprof.StartCPUProfile in bench/scheduler.go), restricted to samples with Scheduler.Tick on the stack."}
		for _, t := range [][]string{
			{"-top", "-cum", "-nodecount=40", "-focus=scheduler\\.\\(\\*Scheduler\\)\\.Tick$"},
			{"-top", "-nodecount=25", "-focus=scheduler\\.\\(\\*Scheduler\\)\\.Tick$"},
		} {
			a := append(append([]string{"tool", "pprof"}, t...), b.self, b.schedProfile)
			out, err := exec.Command(b.o.goCmd, a...).CombinedOutput()
			if err != nil {
				pr.err = fmt.Sprintf("go %s: %v", strings.Join(a, " "), err)
			}
			pr.tops = append(pr.tops, profileTop{cmd: "go tool pprof " + strings.Join(t, " "), out: trimPprof(string(out))})
		}
		b.profiles = append(b.profiles, pr)
	}
	for _, key := range []string{"place", "warm"} {
		if b.schedMissed[key] {
			b.profileBench("scheduler-"+key, "scheduler: "+schedProfiles[key].bench, schedProfiles[key])
		}
	}
}

// profileBench runs one in-process benchmark under a CPU (or heap) profiler and records the
// top of the profile.
func (b *bench) profileBench(file, title string, pf profileSpec) {
	logf("profiling %s in process: %s", title, pf.bench)
	testBin := filepath.Join(b.tmp, "bench.test")
	prof := filepath.Join(b.tmp, file+".prof")
	args := []string{"test", "./bench", "-run", "^$", "-bench", "^" + pf.bench + "$", "-benchmem", "-o", testBin}
	args = append(args, pf.args...)
	var env []string
	if pf.heap {
		env = append(env, "BENCH_HEAPPROFILE="+prof)
	} else {
		args = append(args, "-cpuprofile", prof)
	}
	cmd := exec.Command(b.o.goCmd, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	line := strings.Join(append(append(env, b.o.goCmd), args...), " ")
	pr := profileResult{scenario: title, bench: string(out), how: "`" + line + "` (" + pf.how + ")"}
	if err != nil {
		pr.err = err.Error()
		b.profiles = append(b.profiles, pr)
		return
	}
	tops := pf.tops
	switch {
	case tops != nil:
	case pf.heap:
		tops = [][]string{{"-top", "-nodecount=12", "-sample_index=inuse_space"},
			{"-list=core\\.\\(\\*Jobs\\)\\.Submit$", "-sample_index=inuse_space"}}
	default:
		tops = [][]string{{"-top", "-nodecount=20"}, {"-top", "-cum", "-nodecount=30"},
			{"-top", "-cum", "-nodecount=30", "-show=gantryhq/gantry/|pebble/v2\\.\\(\\*DB\\)|unix\\.Fdatasync|encoding/json\\.(Marshal|Unmarshal)$", "-hide=gantry/bench\\."}}
	}
	for _, t := range tops {
		a := append(append([]string{"tool", "pprof"}, t...), testBin, prof)
		out, err := exec.Command(b.o.goCmd, a...).CombinedOutput()
		if err != nil {
			pr.err = fmt.Sprintf("go %s: %v", strings.Join(a, " "), err)
		}
		pr.tops = append(pr.tops, profileTop{cmd: "go tool pprof " + strings.Join(t, " "), out: trimPprof(string(out))})
	}
	b.profiles = append(b.profiles, pr)
	if b.o.keep {
		logf("profile of %s: %s (binary %s)", title, prof, testBin)
	}
}

// emptyListLine is a source line of `pprof -list` with no samples.
var emptyListLine = regexp.MustCompile(`^\s+\.\s+\.\s+\d+:`)

// trimPprof drops pprof's header lines that name temp paths, and unsampled source lines.
func trimPprof(s string) string {
	var keep []string
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, "File:") || strings.HasPrefix(line, "Build ID:") || emptyListLine.MatchString(line) {
			continue
		}
		keep = append(keep, line)
	}
	return strings.Join(keep, "\n")
}
