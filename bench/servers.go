package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gantryhq/gantry/core"
	pebblestore "github.com/gantryhq/gantry/store/pebble"
)

// server is a started server process: gantry serve or the bare handler.
type server struct {
	name string
	cmd  *exec.Cmd
	base string // http://127.0.0.1:port
	log  string // its stderr
	done chan struct{}
}

var listeningRE = regexp.MustCompile(`listening on (http://\S+)`)

// startProcess starts argv, sends stderr to logPath, and waits for a "listening on http://..."
// line on stdout.
func startProcess(name, logPath string, argv ...string) (*server, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		_ = logFile.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	s := &server{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := listeningRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() { _ = cmd.Wait(); _ = logFile.Close(); close(s.done) }()
	select {
	case s.base = <-found:
		return s, nil
	case <-s.done:
		return nil, fmt.Errorf("%s exited before listening; see %s", name, logPath)
	case <-time.After(60 * time.Second):
		s.stop()
		return nil, fmt.Errorf("%s did not print its address within 60 s; see %s", name, logPath)
	}
}

// stop sends SIGTERM and waits up to 40 s (gantry's graceful shutdown is bounded by 30 s),
// then kills.
func (s *server) stop() {
	if s == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(40 * time.Second):
		logf("%s did not stop within 40 s of SIGTERM; killing it", s.name)
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// memory returns the process's VmRSS and VmHWM in bytes.
func (s *server) memory() (rss, hwm int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			hwm = kb << 10
		}
	}
	if rss == 0 {
		return 0, 0, errors.New("no VmRSS in /proc/<pid>/status")
	}
	return rss, hwm, nil
}

// cpu returns the CPU time (user + system) the process has used so far, in seconds; waited-for
// children are not included.
func (s *server) cpu() float64 { return procCPU(s.cmd.Process.Pid) }

// childrenCPU returns the CPU time the process's live children have used, and how many there
// are (gantry serve's worker processes).
func (s *server) childrenCPU() (secs float64, n int) {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", s.cmd.Process.Pid))
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", s.cmd.Process.Pid, t.Name()))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				secs += procCPU(pid)
				n++
			}
		}
	}
	return secs, n
}

// procCPU reads utime + stime of a process from /proc/<pid>/stat.
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	str := string(b)
	f := strings.Fields(str[strings.LastIndexByte(str, ')')+1:])
	var ticks uint64
	for _, v := range f[11:13] { // fields 14 and 15: utime, stime
		n, _ := strconv.ParseUint(v, 10, 64)
		ticks += n
	}
	return float64(ticks) / clockTicks
}

// gantry is a running `gantry serve` with a key for user bench.
type gantry struct {
	*server
	bin, data, key string
}

// startGantry starts `gantry serve` on a fresh data dir under dir, unlimited quotas, and issues
// a key.
func (b *bench) startGantry(label string) (*gantry, error) { return b.startGantryPools(label, "") }

// startGantryPools is startGantry with more pools in the config file after the CPU pool
// `local` (YAML list items, each line indented by two spaces).
func (b *bench) startGantryPools(label, morePools string) (*gantry, error) {
	data := filepath.Join(b.tmp, label+"-data")
	// One CPU pool with room for every worker a scenario starts (e2e runs 64).
	config := filepath.Join(b.tmp, label+"-config.yaml")
	pool := fmt.Sprintf("pools:\n  - {id: local, adapter: process, gpuType: CPU, displayName: CPU slot, count: 256, maxGpusPerWorker: 1, dataCenterId: LOCAL, cpu: true, vcpus: %d, memoryPerVcpu: 1}\n", runtime.NumCPU())
	pool += morePools
	if err := os.WriteFile(config, []byte(pool), 0o600); err != nil {
		return nil, err
	}
	s, err := startProcess("gantry serve ("+label+")", filepath.Join(b.tmp, label+"-gantry.log"),
		b.o.gantryBin, "serve", "--listen", "127.0.0.1:0", "--data", data, "--config", config,
		"--quota-minute", "0", "--quota-hour", "0", "--quota-day", "0")
	if err != nil {
		return nil, err
	}
	g := &gantry{server: s, bin: b.o.gantryBin, data: data}
	out, err := exec.Command(g.bin, "keys", "create", "--data", data, "--user", "bench").Output()
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("gantry keys create: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	g.key = strings.TrimSpace(lines[len(lines)-1])
	if err := waitHealthz(g.base); err != nil {
		s.stop()
		return nil, err
	}
	logf("gantry serve (%s) on %s, pid %d", label, g.base, s.cmd.Process.Pid)
	return g, nil
}

func waitHealthz(base string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s/healthz not 200 after 30 s (last error %v)", base, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// createEndpoint creates a QUEUE endpoint from the gantry-echo template with the given workers
// bounds and returns its id.
func (g *gantry) createEndpoint(name string, min, max int) (string, error) {
	return g.createEndpointEnv(name, min, max, nil)
}

// createEndpointEnv is createEndpoint with env for the endpoint's workers.
func (g *gantry) createEndpointEnv(name string, min, max int, env map[string]string) (string, error) {
	envField := ""
	if env != nil {
		e, _ := json.Marshal(env)
		envField = `,"env":` + string(e)
	}
	body := fmt.Sprintf(`{"name":%q,"type":"QUEUE","templateId":"gantry-echo","gpu":{"pools":["local"]},`+
		`"scaling":{"type":"QUEUE_DELAY","queueDelay":4},"workers":{"min":%d,"max":%d}%s}`, name, min, max, envField)
	return g.postEndpoint(name, body)
}

// postEndpoint creates an endpoint from a POST /v2/serverless body and returns its id.
func (g *gantry) postEndpoint(name, body string) (string, error) {
	req, _ := http.NewRequest("POST", g.base+"/v2/serverless", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+g.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	rb, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 201 {
		return "", fmt.Errorf("creating endpoint %s: %d %s", name, resp.StatusCode, rb)
	}
	var ep struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(rb, &ep); err != nil || ep.ID == "" {
		return "", fmt.Errorf("creating endpoint %s: no id in %s", name, rb)
	}
	return ep.ID, nil
}

// health is GET /v2/{endpoint}/health.
type health struct {
	Jobs struct {
		Completed  int64 `json:"completed"`
		Failed     int64 `json:"failed"`
		InProgress int64 `json:"inProgress"`
		InQueue    int64 `json:"inQueue"`
		Retried    int64 `json:"retried"`
	} `json:"jobs"`
	Workers struct {
		Idle         int `json:"idle"`
		Running      int `json:"running"`
		Initializing int `json:"initializing"`
		Suspended    int `json:"suspended"`
		Throttled    int `json:"throttled"`
		Unhealthy    int `json:"unhealthy"`
	} `json:"workers"`
	ColdStarts *struct {
		Count  int64 `json:"count"`
		LastMs int64 `json:"lastMs"`
		MeanMs int64 `json:"meanMs"`
	} `json:"coldStarts"`
}

func (g *gantry) health(c *http.Client, endpoint string) (health, error) {
	var h health
	req, _ := http.NewRequest("GET", g.base+"/v2/"+endpoint+"/health", nil)
	req.Header.Set("Authorization", g.key)
	resp, err := c.Do(req)
	if err != nil {
		return h, err
	}
	defer func() { _ = resp.Body.Close() }()
	rb, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return h, fmt.Errorf("health: %d %s", resp.StatusCode, rb)
	}
	return h, json.Unmarshal(rb, &h)
}

// waitWorkers polls health until at least n workers are idle.
func (g *gantry) waitWorkers(endpoint string, n int, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	var h health
	var err error
	for time.Since(start) < timeout {
		h, err = g.health(http.DefaultClient, endpoint)
		if err == nil && h.Workers.Idle >= n {
			return time.Since(start), nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return 0, fmt.Errorf("%d idle workers wanted; after %v health says %+v (err %v)", n, timeout, h.Workers, err)
}

// startBare re-executes this binary with -bare-serve.
func (b *bench) startBare(label string) (*server, error) { return b.startPeer("bare handler", label) }

// startFloor starts the durable floor: the bare handler plus Gantry's synced store write, on a
// fresh data dir.
func (b *bench) startFloor(label string) (*server, error) {
	return b.startPeer("durable floor", label, "-bare-durable", filepath.Join(b.tmp, label+"-floor-data"))
}

// startPeer re-executes this binary with -bare-serve and args: one of the peers Gantry is
// measured beside, named name, for the scenario label.
func (b *bench) startPeer(name, label string, args ...string) (*server, error) {
	logName := label + "-" + strings.ReplaceAll(name, " ", "-") + ".log"
	s, err := startProcess(name+" ("+label+")", filepath.Join(b.tmp, logName), append([]string{b.self, "-bare-serve"}, args...)...)
	if err != nil {
		return nil, err
	}
	logf("%s (%s) on %s, pid %d", name, label, s.base, s.cmd.Process.Pid)
	return s, nil
}

// serveBare is the bare handler: a plain net/http server, configured like gantry serve's, that
// reads the body and answers what Gantry answers in shape: {"id":"<36 chars>","status":"IN_QUEUE"}
// for /run, and a completed job for /runsync. With a durable dir it is the durable floor: before
// answering /run it stores the body as a job's input in a Pebble store opened there, synced,
// through Gantry's own store (store/pebble: the same options, the same batch of record and
// input, Pebble's group commit), and nothing else of Gantry's.
func serveBare(durable string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	st, err := openFloorStore(durable)
	if err != nil {
		return err
	}
	defer st.close()
	srv := &http.Server{
		Handler:           bareHandler(st),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	fmt.Printf("bare handler listening on http://%s\n", ln.Addr())
	ctx, stop := signalContext()
	defer stop()
	go func() { <-ctx.Done(); _ = srv.Shutdown(context.Background()) }()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// bareHandler reads the body and answers; with an open st it first stores the body synced (the
// durable floor).
func bareHandler(st floorStore) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 20<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		id := bareID()
		if st.put(w, id, core.InQueue, body, true) {
			bareAnswer(w, r, id)
		}
	}
}

// floorStore is the store of the durable floors: Gantry's own (store/pebble: the same options,
// the same batch of record and input, Pebble's group commit). Its zero value stores nothing.
type floorStore struct{ st *pebblestore.Store }

// openFloorStore opens the store in dir; "" = none.
func openFloorStore(dir string) (floorStore, error) {
	if dir == "" {
		return floorStore{}, nil
	}
	st, err := pebblestore.Open(dir)
	return floorStore{st}, err
}

func (f floorStore) close() {
	if f.st != nil {
		_ = f.st.Close()
	}
}

// put stores a job record with the given status (and input, when not nil), synced or not, or
// answers 500 and returns false when it cannot. Without a store it does nothing.
func (f floorStore) put(w http.ResponseWriter, id string, status core.JobStatus, input []byte, sync bool) bool {
	if f.st == nil {
		return true
	}
	if err := f.st.PutJob(&core.Job{ID: id, Status: status}, input, sync); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return false
	}
	return true
}

// bareID is a random id in Gantry's shape (36 characters).
func bareID() string {
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	h := hex.EncodeToString(raw[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// bareAnswer writes the bare handler's answer for the job id.
func bareAnswer(w http.ResponseWriter, r *http.Request, id string) {
	var out bytes.Buffer
	if strings.HasSuffix(r.URL.Path, "/runsync") {
		out.WriteString(`{"delayTime":0,"executionTime":0,"id":"sync-` + id + `","output":1,"retries":0,"status":"COMPLETED"}`)
	} else {
		out.WriteString(`{"id":"` + id + `","status":"IN_QUEUE"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out.Bytes())
}
