package runpod

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gantryhq/gantry/adapters/runpod/rpapi"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// phase is where a worker's pod is in its life, as the pool drives it.
type phase int

const (
	creating   phase = iota // Start is creating the pod
	booting                 // created; WorkerRunning once it is RUNNING
	running                 // RUNNING and reported
	suspending              // Suspend asked for the stop action; WorkerSuspended once EXITED
	suspended               // stopped and kept (FLASHBOOT): its GPUs are released, its disk kept
	resuming                // Resume asked for the start action; WorkerResumed once RUNNING
	exited                  // gone: WorkerExited is (being) reported
)

func (ph phase) String() string {
	return [...]string{"creating", "booting", "running", "suspending", "suspended", "resuming", "exited"}[ph]
}

// worker is one worker's pod.
type worker struct {
	id      string
	count   int     // GPUs of its pod
	price   float64 // USD/h of its pod at the catalog's list price
	portEnv map[string]int
	report  func(pool.WorkerEvent)
	gone    chan struct{} // closed once WorkerExited is reported

	// op is held by whoever changes the pod (create, stop and start actions, terminate), one
	// at a time. It is taken before rep and mu.
	op sync.Mutex
	// rep is held while an event is decided and reported, so events go out in order.
	rep sync.Mutex

	mu       sync.Mutex
	pod      string // RunPod's pod id; "" until created
	phase    phase
	changed  time.Time // when the pool last changed the pod (create, stop, start): older lists are stale for it
	stopping bool      // Stop was called, or the pod ended by itself: a terminate is under way
	ran      bool      // WorkerRunning was reported
}

// Start creates the worker's pod and returns once RunPod accepted it (PROVISIONING); the pool
// reports WorkerRunning when the pod is RUNNING. A start over the cost guard's caps, or one
// RunPod cannot place now, is refused with a *ThrottledError.
func (p *Pool) Start(ctx context.Context, spec pool.WorkerSpec) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("starting worker %s: %w", spec.ID, err)
	}
	if spec.ID == "" || spec.Report == nil || spec.Image == "" {
		return fmt.Errorf("starting worker %q: the spec needs an ID, an Image and a Report", spec.ID)
	}
	// An Elastic pool's specs carry no device indices (RunPod picks the machine's GPUs); a
	// caller that sends some still gets that many GPUs.
	count := max(len(spec.GPUs), spec.GPUCount, 1)
	if max := p.perPod(); count > max {
		return fmt.Errorf("starting worker %s: %d GPUs asked; a pod of %s has at most %d: %w", spec.ID, count, p.desc.GPUType, max, pool.ErrNoCapacity)
	}
	req, err := p.podRequest(spec, count)
	if err != nil {
		return fmt.Errorf("starting worker %s: %w", spec.ID, err)
	}
	if spec.Volume != nil { // volume.go
		if err := p.mountVolume(ctx, req, *spec.Volume); err != nil {
			return fmt.Errorf("starting worker %s: its network volume: %w", spec.ID, err)
		}
	}
	w := &worker{id: spec.ID, count: count, price: p.price(count),
		portEnv: maps.Clone(spec.PortEnv), report: spec.Report, gone: make(chan struct{})}
	w.op.Lock()
	defer w.op.Unlock()
	if err := p.admit(w); err != nil {
		return fmt.Errorf("starting worker %s: %w", spec.ID, err)
	}
	// The pod outlives ctx: a create cut off halfway may still have created it.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), apiTimeout)
	defer cancel()
	pod, err := p.createPod(cctx, req)
	if err != nil {
		p.forgetVolume(req) // volume.go
		w.mu.Lock()
		w.phase = exited
		w.mu.Unlock()
		p.live.Remove(w.id, nil)
		close(w.gone)
		if isCapacity(err) {
			return fmt.Errorf("starting worker %s: %w", spec.ID, &ThrottledError{Reason: "RunPod cannot place the pod now: " + err.Error()})
		}
		if isAuth(err) {
			return fmt.Errorf("starting worker %s: pool %s is unhealthy: RunPod refuses the API key in $%s: %w", spec.ID, p.desc.ID, p.cfg.APIKeyEnv, err)
		}
		p.recheck.Store(true) // a create that failed halfway may have left a pod: the watch reaps it
		p.kickWatch()
		return fmt.Errorf("starting worker %s: %w", spec.ID, err)
	}
	w.mu.Lock()
	w.pod, w.phase, w.changed = pod.ID, booting, time.Now()
	w.mu.Unlock()
	p.log.Info("pod created", "worker", w.id, "pod", pod.ID, "gpus", count, "usdPerHour", w.price)
	p.kickWatch()
	return nil
}

// admit checks the pool's capacity and cost guard and registers the worker.
func (p *Pool) admit(w *worker) error {
	p.admitMu.Lock()
	defer p.admitMu.Unlock()
	if err := p.guard(nil, w.count, false); err != nil {
		return err
	}
	return p.live.Add(w.id, nil, w)
}

// podRequest is the create body for a worker: the image, args and env (the worker-protocol
// URLs pointed at the public URL, and the pool's identity variables), the ports, the GPU type
// and count with the allowed CUDA versions (the endpoint's and the pool's), the data centers,
// cloud, registry credential and container disk.
func (p *Pool) podRequest(spec pool.WorkerSpec, count int) (*rpapi.CreatePod, error) {
	cuda, err := p.allowedCUDA(spec.CUDAVersions)
	if err != nil {
		return nil, err
	}
	env := rpapi.CreatePodEnv{}
	for k, v := range spec.Env {
		env[k] = v
		if strings.HasPrefix(k, "RUNPOD_WEBHOOK_") {
			env[k] = p.public(v)
		}
	}
	env[EnvInstallation], env[EnvPool], env[EnvWorker], env[EnvEndpoint] = p.cfg.Installation, p.desc.ID, spec.ID, spec.Endpoint
	var ports []string
	for _, k := range slices.Sorted(maps.Keys(spec.PortEnv)) {
		port := spec.PortEnv[k]
		env[k] = strconv.Itoa(port)
		if pp := strconv.Itoa(port) + "/tcp"; !slices.Contains(ports, pp) {
			ports = append(ports, pp)
		}
	}
	for _, pp := range spec.Ports {
		if !slices.Contains(ports, pp) {
			ports = append(ports, pp)
		}
	}
	req := &rpapi.CreatePod{Name: podName(p.cfg.Installation, spec.ID), Image: spec.Image, Env: rpapi.NewOptCreatePodEnv(env),
		Ports: ports, Disk: rpapi.NewOptInt(p.cfg.Disk),
		Cloud: rpapi.NewOptCloud(rpapi.Cloud(p.cfg.Cloud)), DataCenterIds: slices.Clone(p.cfg.DataCenters),
		Gpu: rpapi.NewOptGpuRequest(rpapi.GpuRequest{ID: p.desc.GPUType, Count: rpapi.NewOptInt(count),
			AllowedCudaVersions: cuda})}
	if spec.Disk > 0 {
		req.Disk = rpapi.NewOptInt(spec.Disk)
	}
	if spec.Args != "" {
		req.Args = rpapi.NewOptString(spec.Args)
	}
	if spec.Registry != "" {
		id, ok := p.cfg.Registries[spec.Registry]
		if !ok {
			return nil, fmt.Errorf("registry credential %q has no RunPod registry credential id in the pool's registries", spec.Registry)
		}
		req.Registry = rpapi.NewOptString(id)
	}
	return req, nil
}

// allowedCUDA is the CUDA versions a pod of an endpoint that allows endpoint (its
// allowedCudaVersions; empty = any) may run, sorted: those of the endpoint that the pool's
// config names too, the endpoint's when the pool names none (it took its versions from the
// catalog), the pool's when the endpoint names none, or none (any) when neither does. An
// endpoint and a pool with no version in common is an error (placement does not choose such a
// pool).
func (p *Pool) allowedCUDA(endpoint []string) ([]string, error) {
	pl := p.poolCUDA()
	if len(endpoint) == 0 {
		return pl, nil
	}
	want, err := core.SortCUDAVersions(endpoint)
	if err != nil {
		return nil, fmt.Errorf("the endpoint's allowedCudaVersions: %w", err)
	}
	if pl == nil {
		return want, nil
	}
	both := slices.DeleteFunc(want, func(v string) bool { return !slices.Contains(pl, v) })
	if len(both) == 0 {
		return nil, fmt.Errorf("the endpoint allows CUDA %s, and the pool's pods run %s: none in common",
			strings.Join(endpoint, ", "), strings.Join(pl, ", "))
	}
	return both, nil
}

// poolCUDA is the CUDA versions the pool's pods may run: those the pool's config names
// (sorted), or none (any) when the pool took its versions from the catalog.
func (p *Pool) poolCUDA() []string {
	if len(p.cfg.Pool.CUDAVersions) == 0 {
		return nil
	}
	return p.Describe().CUDAVersions
}

// podName is a pod's name: the installation and the worker, for people reading RunPod's
// console (the pool itself knows its pods by their environment).
func podName(installation, worker string) string {
	n := "gantry-" + installation + "-" + worker
	if len(n) > 191 {
		n = n[:191]
	}
	return n
}

// OwnsWorkerURL implements pool.WorkerURLOwner: pods in RunPod's cloud reach Gantry at the
// pool's publicUrl, whatever base URL the scheduler gave them.
func (p *Pool) OwnsWorkerURL() bool { return p.cfg.PublicURL != "" }

// public points a worker-protocol URL at the pool's public URL: the scheme and host Gantry
// gave it are replaced, the path and query kept.
func (p *Pool) public(u string) string {
	_, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u
	}
	i := strings.IndexByte(rest, '/')
	if i < 0 {
		return p.cfg.PublicURL
	}
	return p.cfg.PublicURL + rest[i:]
}

// Stop terminates the worker's pod in the background; WorkerExited (stopped) follows once
// RunPod has terminated it. A worker being created is terminated once its create returns. A
// worker this pool did not start (Workers found its pod, left by an earlier run) has its pod
// terminated before Stop returns, with no event.
func (p *Pool) Stop(ctx context.Context, id string) error {
	w, ok := p.live.Get(id)
	if !ok {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), apiTimeout)
		defer cancel()
		return p.terminateFound(cctx, id)
	}
	w.mu.Lock()
	if w.stopping || w.phase == exited {
		w.mu.Unlock()
		return nil
	}
	w.stopping = true
	w.mu.Unlock()
	go p.terminate(w, nil)
	return nil
}

// terminate deletes a worker's pod, retrying until RunPod confirms it (or the pool is
// closed), then reports WorkerExited: stopped when why is nil, else with why.
func (p *Pool) terminate(w *worker, why error) {
	w.op.Lock()
	defer w.op.Unlock()
	w.mu.Lock()
	pod, ph := w.pod, w.phase
	w.mu.Unlock()
	if ph == exited { // Start refused it, or it was reported already
		return
	}
	for delay := time.Second; pod != ""; delay = min(2*delay, 30*time.Second) {
		ctx, cancel := context.WithTimeout(p.ctx, apiTimeout)
		err := p.deletePod(ctx, p.api, pod)
		if isConflict(err) { // 409: re-read the pod; one that is gone needs nothing more
			if _, gerr := p.getPod(ctx, pod); isNotFound(gerr) {
				err = nil
			}
		}
		cancel()
		if err == nil || isNotFound(err) {
			break
		}
		p.log.Warn("terminating a pod; trying again", "worker", w.id, "pod", pod, "in", delay, "err", err)
		select {
		case <-time.After(delay):
		case <-p.ctx.Done():
			p.log.Error("the pool closed before RunPod terminated a pod: the next run terminates it", "worker", w.id, "pod", pod)
			return
		}
	}
	p.finish(w, why)
}

// finish reports a worker's exit once: WorkerRunning first if it never ran (a pod stopped or
// failed before it was RUNNING), its GPUs given back before WorkerExited.
func (p *Pool) finish(w *worker, why error) {
	w.rep.Lock()
	defer w.rep.Unlock()
	w.mu.Lock()
	if w.phase == exited {
		w.mu.Unlock()
		return
	}
	ran := w.ran
	w.phase, w.ran = exited, true
	w.mu.Unlock()
	p.live.Remove(w.id, nil)
	now := p.clock.Now()
	if !ran {
		w.report(pool.WorkerEvent{Worker: w.id, State: pool.WorkerRunning, At: now})
	}
	w.report(pool.WorkerEvent{Worker: w.id, State: pool.WorkerExited, At: now, Err: why, Stopped: why == nil})
	close(w.gone)
}

// advance moves a worker from phase from to phase to and reports ev, unless it has moved on
// meanwhile.
func (p *Pool) advance(w *worker, from, to phase, state pool.WorkerState, addrs map[int]string) {
	w.rep.Lock()
	defer w.rep.Unlock()
	w.mu.Lock()
	if w.phase != from || w.stopping {
		w.mu.Unlock()
		return
	}
	w.phase = to
	ran := w.ran
	w.ran = true
	w.mu.Unlock()
	if state == pool.WorkerRunning && ran {
		return
	}
	w.report(pool.WorkerEvent{Worker: w.id, State: state, At: p.clock.Now(), Addrs: addrs})
}

// Suspend stops the worker's pod and keeps it (FLASHBOOT: the stop action releases its GPUs
// and keeps its disk); WorkerSuspended follows once the pod is EXITED. An action RunPod
// refuses for the pod's state (409) is reconciled from the pod read again.
func (p *Pool) Suspend(ctx context.Context, id string) error {
	w, err := p.phased(id, "suspend", running)
	if err != nil {
		return err
	}
	defer w.op.Unlock()
	w.mu.Lock()
	pod := w.pod
	w.phase = suspending
	w.mu.Unlock()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), apiTimeout)
	defer cancel()
	got, err := p.action(cctx, pod, rpapi.PodActionStop)
	if isConflict(err) {
		got, err = p.reread(cctx, pod, err, rpapi.PodStatusEXITED)
	}
	p.touch(w)
	if err != nil {
		p.setPhase(w, suspending, running)
		return fmt.Errorf("suspending worker %s: %w", id, err)
	}
	if got.Status == rpapi.PodStatusEXITED {
		p.advance(w, suspending, suspended, pool.WorkerSuspended, nil)
	}
	p.kickWatch()
	return nil
}

// Resume starts the worker's stopped pod again, within the cost guard; WorkerResumed follows
// once it is RUNNING. RunPod may have no free GPU on the pod's machine: Resume then fails, and
// the scheduler starts a fresh worker instead.
func (p *Pool) Resume(ctx context.Context, id string) error {
	w, err := p.phased(id, "resume", suspended)
	if err != nil {
		return err
	}
	defer w.op.Unlock()
	if err := p.guard(w, w.count, true); err != nil {
		return fmt.Errorf("resuming worker %s: %w", id, err)
	}
	w.mu.Lock()
	pod := w.pod
	w.phase = resuming
	w.mu.Unlock()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), apiTimeout)
	defer cancel()
	_, err = p.action(cctx, pod, rpapi.PodActionStart)
	if isConflict(err) {
		_, err = p.reread(cctx, pod, err, rpapi.PodStatusPROVISIONING, rpapi.PodStatusSTARTING, rpapi.PodStatusRUNNING)
	}
	p.touch(w)
	if err != nil {
		p.setPhase(w, resuming, suspended)
		return fmt.Errorf("resuming worker %s: %w", id, err)
	}
	p.kickWatch()
	return nil
}

// phased returns live worker id with its op lock held, if it is in phase want and not
// stopping; else an error naming it.
func (p *Pool) phased(id, verb string, want phase) (*worker, error) {
	w, ok := p.live.Get(id)
	if !ok {
		return nil, fmt.Errorf("cannot %s worker %s: no such worker in pool %s", verb, id, p.desc.ID)
	}
	w.op.Lock()
	w.mu.Lock()
	ph, stopping := w.phase, w.stopping
	w.mu.Unlock()
	if stopping || ph != want {
		w.op.Unlock()
		if stopping || ph == exited {
			return nil, fmt.Errorf("cannot %s worker %s: it is stopping or exited", verb, id)
		}
		return nil, fmt.Errorf("cannot %s worker %s: it is %s, not %s", verb, id, ph, want)
	}
	return w, nil
}

// touch notes that the pool changed w's pod just now.
func (p *Pool) touch(w *worker) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.changed = time.Now()
}

func (p *Pool) setPhase(w *worker, from, to phase) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.phase == from {
		w.phase = to
	}
}

// reread answers a 409 (an action not valid in the pod's state): the pod read again, when it
// is already in one of the states the action was for; else the 409 with the state it is in.
func (p *Pool) reread(ctx context.Context, pod string, conflict error, ok ...rpapi.PodStatus) (*rpapi.Pod, error) {
	got, err := p.getPod(ctx, pod)
	if err != nil {
		return nil, err
	}
	if slices.Contains(ok, got.Status) {
		return got, nil
	}
	return nil, fmt.Errorf("%w (the pod is %s)", conflict, got.Status)
}

// kickWatch asks the watch loop to list pods now.
func (p *Pool) kickWatch() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// watch lists the pool's pods while it has workers (every Poll, and at once when kicked), and
// reads the catalog (stock, prices, the key's health) every CatalogEvery, until the pool is
// closed. Each backs off while its calls fail (RunPod's pacing headers are honoured by the
// transport, on top).
func (p *Pool) watch() {
	defer close(p.done)
	var listFailures, catalogFailures int
	p.mu.Lock()
	catalogDue := p.catalog.Add(p.cfg.CatalogEvery) // zero when New could not read it: now
	p.mu.Unlock()
	var listDue time.Time
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		kicked := false
		select {
		case <-p.ctx.Done():
			return
		case <-timer.C:
		case <-p.kick:
			kicked = true
		}
		now := p.clock.Now()
		if !now.Before(catalogDue) {
			ctx, cancel := context.WithTimeout(p.ctx, apiTimeout)
			err := p.readCatalog(ctx)
			cancel()
			switch {
			case err == nil:
				catalogFailures, catalogDue = 0, now.Add(p.cfg.CatalogEvery)
			case p.ctx.Err() == nil:
				catalogFailures++
				wait := min(p.cfg.Poll<<min(catalogFailures, 10), p.cfg.CatalogEvery)
				catalogDue = now.Add(wait)
				p.log.Warn("reading RunPod's catalog; backing off", "inARow", catalogFailures, "next", wait, "err", err)
			}
		}
		listing := len(p.live.All()) > 0 || p.recheck.Load()
		if listing && (kicked || !now.Before(listDue)) {
			p.recheck.Store(false)
			ctx, cancel := context.WithTimeout(p.ctx, apiTimeout)
			asked := time.Now()
			pods, err := p.listPods(ctx)
			cancel()
			switch {
			case err == nil:
				listFailures, listDue = 0, now.Add(p.cfg.Poll)
				p.reconcile(pods, asked)
			case p.ctx.Err() == nil:
				p.recheck.Store(true)
				listFailures++
				wait := min(p.cfg.Poll<<min(listFailures, 10), time.Minute)
				listDue = now.Add(wait)
				p.log.Warn("listing pods; backing off", "inARow", listFailures, "next", wait, "err", err)
			}
		}
		next := catalogDue.Sub(now)
		if listing {
			next = min(next, listDue.Sub(now))
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(max(next, 0))
	}
}

// reconcile moves each worker on from what the list asked for at asked says of its pod, and
// terminates the pods of this installation and pool that no live worker runs. A worker whose
// pod the pool changed after asked waits for the next list.
func (p *Pool) reconcile(pods []rpapi.Pod, asked time.Time) {
	byID := make(map[string]*rpapi.Pod, len(pods))
	for i := range pods {
		pod := &pods[i]
		byID[pod.ID] = pod
		if id, ok := p.ours(pod); ok {
			if _, live := p.live.Get(id); !live {
				p.log.Warn("terminating a pod of this pool that no worker runs", "pod", pod.ID, "worker", id)
				ctx, cancel := context.WithTimeout(p.ctx, apiTimeout)
				if err := p.deletePod(ctx, p.bg, pod.ID); err != nil && !isNotFound(err) {
					p.log.Warn("terminating a pod no worker runs", "pod", pod.ID, "err", err)
				}
				cancel()
			}
		}
	}
	for _, w := range p.live.All() {
		w.mu.Lock()
		id, ph, stopping, changed := w.pod, w.phase, w.stopping, w.changed
		w.mu.Unlock()
		if stopping || ph == creating || ph == exited || !changed.Before(asked) {
			continue
		}
		pod := byID[id]
		switch {
		case pod == nil:
			p.end(w, fmt.Errorf("pod %s was terminated outside Gantry", id))
		case pod.Status == rpapi.PodStatusRUNNING && ph == booting:
			p.advance(w, booting, running, pool.WorkerRunning, p.addrs(w, pod))
		case pod.Status == rpapi.PodStatusRUNNING && ph == resuming:
			p.advance(w, resuming, running, pool.WorkerResumed, nil)
		case pod.Status == rpapi.PodStatusEXITED && ph == suspending:
			p.advance(w, suspending, suspended, pool.WorkerSuspended, nil)
		case pod.Status == rpapi.PodStatusEXITED && (ph == suspended || ph == resuming):
			// kept; or the start action is yet to show
		case pod.Status == rpapi.PodStatusEXITED || pod.Status == rpapi.PodStatusERROR || pod.Status == rpapi.PodStatusTERMINATED:
			p.end(w, fmt.Errorf("pod %s is %s", id, pod.Status))
		}
	}
}

// end reports a worker whose pod ended by itself: it reads the pod's last log lines into the
// error, terminates the pod (so that its disk is not billed), and reports WorkerExited.
func (p *Pool) end(w *worker, why error) {
	w.mu.Lock()
	if w.stopping || w.phase == exited {
		w.mu.Unlock()
		return
	}
	w.stopping = true
	pod := w.pod
	w.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(p.ctx, apiTimeout)
		lines, err := p.tail(ctx, pod, 10)
		cancel()
		if err == nil && len(lines) > 0 {
			why = fmt.Errorf("%w; its last log lines: %s", why, strings.Join(lines, " | "))
		}
		p.log.Warn("a worker's pod ended by itself", "worker", w.id, "pod", pod, "err", why)
		p.terminate(w, why)
	}()
}

// addrs are where a RUNNING pod's port variables are reached: the public address RunPod
// maps each private TCP port to.
func (p *Pool) addrs(w *worker, pod *rpapi.Pod) map[int]string {
	if len(w.portEnv) == 0 {
		return nil
	}
	out := map[int]string{}
	rt, _ := pod.Runtime.Get()
	for _, port := range w.portEnv {
		for _, rp := range rt.Ports {
			ip, okIP := rp.IP.Get()
			pub, okPub := rp.Public.Get()
			if rp.Private.Or(-1) == port && okIP && okPub && ip != "" {
				out[port] = net.JoinHostPort(ip, strconv.Itoa(pub))
			}
		}
	}
	return out
}

// tail returns the last n lines of a pod's log (system and container), oldest first.
func (p *Pool) tail(ctx context.Context, pod string, n int) ([]string, error) {
	res, err := p.api.GetPodLogs(ctx, rpapi.GetPodLogsParams{ID: pod, Tail: rpapi.NewOptInt(n)})
	if err != nil {
		return nil, fmt.Errorf("RunPod getPodLogs %s: %w", pod, err)
	}
	switch r := res.(type) {
	case *rpapi.GetPodLogsOKHeaders:
		return readEvents(r.Response.Data, n)
	case *rpapi.ProblemStatusCodeWithHeaders:
		return nil, apiError("getPodLogs "+pod, r)
	}
	return nil, unexpected("getPodLogs", res)
}

// readEvents reads the lines of a log's server-sent events (`data: {"source","line","ts"}`),
// keeping the last n.
func readEvents(r io.Reader, n int) ([]string, error) {
	var lines []string
	sc := bufio.NewScanner(io.LimitReader(r, 16<<20))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue
		}
		var ev struct{ Source, Line string }
		if err := json.Unmarshal([]byte(strings.TrimSpace(data)), &ev); err != nil {
			continue
		}
		line := ev.Line
		if ev.Source == "system" {
			line = "[system] " + line
		}
		lines = append(lines, line)
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return lines, sc.Err()
}

// Logs returns the last tail lines (0 = RunPod's most, 5000) of a live worker's pod log, system lines marked
// "[system]". RunPod deletes a pod's log with the pod, so an exited worker has none.
func (p *Pool) Logs(ctx context.Context, id string, tail int) (io.ReadCloser, error) {
	w, ok := p.live.Get(id)
	var pod string
	if ok {
		w.mu.Lock()
		pod = w.pod
		w.mu.Unlock()
	}
	if pod == "" {
		return nil, fmt.Errorf("logs of worker %s: no live pod (RunPod deletes a pod's log with the pod): %w", id, fs.ErrNotExist)
	}
	if tail <= 0 || tail > 5000 {
		tail = 5000
	}
	lines, err := p.tail(ctx, pod, tail)
	if isNotFound(err) {
		return nil, fmt.Errorf("logs of worker %s: %w: %w", id, err, fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("logs of worker %s: %w", id, err)
	}
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return io.NopCloser(strings.NewReader(b.String())), nil
}
