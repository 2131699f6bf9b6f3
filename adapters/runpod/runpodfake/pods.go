package runpodfake

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gantryhq/gantry/adapters/runpod/rpapi"
)

// Pod states, as RunPod names them.
const (
	Provisioning = "PROVISIONING"
	Starting     = "STARTING"
	Running      = "RUNNING"
	Exited       = "EXITED"
	Error        = "ERROR"
)

// pod is one pod of the fake.
type pod struct {
	seq     int
	id      string
	req     rpapi.CreatePod
	status  string
	since   time.Time // when status began
	created time.Time
	started time.Time // when it was last RUNNING; zero before
	gpu     *GPU
	count   int
	cuda    string
	dc      string
	cost    float64 // USD per hour while it holds its GPUs
	ports   []rpapi.RuntimePort
	ctr     Container // its container while RUNNING (with a Runner)
	busy    bool      // a stop, restart or terminate is stopping its container
	fail    string    // why it fails to start ("" = it starts)
	log     []string
}

// actions are the actions valid in a pod's status, as RunPod documents them.
func actions(status string) []rpapi.PodAction {
	switch status {
	case Running:
		return []rpapi.PodAction{rpapi.PodActionStop, rpapi.PodActionRestart, rpapi.PodActionTerminate}
	case Provisioning, Starting:
		return []rpapi.PodAction{rpapi.PodActionStop, rpapi.PodActionTerminate}
	case Exited, Error:
		return []rpapi.PodAction{rpapi.PodActionStart, rpapi.PodActionTerminate}
	}
	return nil
}

// advance moves every pod on to its state at now: PROVISIONING to STARTING after Provision,
// STARTING to RUNNING (its container started) or ERROR after Boot, RUNNING to EXITED when its
// container exited. f.mu is held.
func (f *Fake) advance(now time.Time) {
	for _, p := range f.sorted() {
		f.advancePod(p, now)
	}
}

func (f *Fake) advancePod(p *pod, now time.Time) {
	if p.busy {
		return
	}
	for {
		switch {
		case p.status == Provisioning && !now.Before(p.since.Add(f.cfg.Provision)):
			p.status, p.since = Starting, p.since.Add(f.cfg.Provision)
			p.system("pod assigned to a machine in %s; pulling %s", p.dc, p.req.Image)
		case p.status == Starting && !now.Before(p.since.Add(f.cfg.Boot)):
			at := p.since.Add(f.cfg.Boot)
			if p.fail != "" {
				p.status, p.since = Error, at
				p.system("container failed to start: %s", p.fail)
				continue
			}
			if err := f.run(p); err != nil {
				p.status, p.since = Error, at
				p.system("container failed to start: %v", err)
				continue
			}
			p.status, p.since, p.started = Running, at, at
			p.system("container started")
		case p.status == Running && p.ctr != nil:
			select {
			case <-p.ctr.Done():
				p.status, p.since = Exited, now
				p.system("container exited with status %d", p.ctr.ExitCode())
				p.ctr = nil
			default:
			}
			return
		default:
			return
		}
	}
}

// run starts a pod's container, when the fake has a Runner. f.mu is held.
func (f *Fake) run(p *pod) error {
	if f.cfg.Runner == nil {
		return nil
	}
	env := map[string]string{}
	if e, ok := p.req.Env.Get(); ok {
		env = maps.Clone(e)
	}
	env["RUNPOD_POD_ID"] = p.id
	env["RUNPOD_GPU_COUNT"] = fmt.Sprint(p.count)
	ctr, err := f.cfg.Runner.Run(ContainerSpec{
		Pod: p.id, Image: p.req.Image, Args: p.req.Args.Or(""), Env: env,
		Log: func(line string) {
			f.mu.Lock()
			defer f.mu.Unlock()
			p.log = append(p.log, line)
		},
	})
	if err != nil {
		return err
	}
	p.ctr = ctr
	return nil
}

// system appends a line to the pod's system log.
func (p *pod) system(format string, args ...any) {
	p.log = append(p.log, "[system] "+fmt.Sprintf(format, args...))
}

// holds reports whether the pod holds its GPUs (and costs their price).
func (p *pod) holds() bool {
	return p.status == Provisioning || p.status == Starting || p.status == Running
}

func (p *pod) view() Pod {
	v := Pod{ID: p.id, Name: p.req.Name, Image: p.req.Image, Args: p.req.Args.Or(""), Status: p.status,
		Ports: slices.Clone(p.req.Ports), GPUs: p.count, Cloud: string(p.req.Cloud.Or(rpapi.CloudSECURE)),
		Registry: p.req.Registry.Or(""), DataCenters: slices.Clone(p.req.DataCenterIds), Disk: p.req.Disk.Or(0),
		Log: slices.Clone(p.log)}
	if e, ok := p.req.Env.Get(); ok {
		v.Env = maps.Clone(e)
	}
	if g, ok := p.req.Gpu.Get(); ok {
		v.GPU, v.CUDA = g.ID, slices.Clone(g.AllowedCudaVersions)
	}
	if p.holds() {
		v.Cost = p.cost
	}
	v.DataCenter = p.dc
	if m, ok := p.req.Mounts.Get(); ok && len(m.Network) > 0 {
		v.NetworkVolume, v.VolumePath = m.Network[0].VolumeId, m.Network[0].Path
	}
	return v
}

// api is the pod as the API shows it.
func (p *pod) api() rpapi.Pod {
	out := rpapi.Pod{ID: p.id, Name: p.req.Name, Status: rpapi.PodStatus(p.status), Actions: actions(p.status),
		Image: p.req.Image, Args: rpapi.NewOptString(p.req.Args.Or("")), Ports: slices.Clone(p.req.Ports),
		Disk: p.req.Disk, Cloud: rpapi.NewOptCloud(p.req.Cloud.Or(rpapi.CloudSECURE)),
		DataCenterId: rpapi.NewOptNilString(p.dc), CreatedAt: p.created, Cost: rpapi.NewOptFloat64(0)}
	if out.Ports == nil {
		out.Ports = []string{}
	}
	if e, ok := p.req.Env.Get(); ok {
		out.Env = rpapi.NewOptPodEnv(rpapi.PodEnv(maps.Clone(e)))
	}
	if p.gpu != nil {
		out.Gpu = rpapi.NewOptPodGpu(rpapi.PodGpu{ID: p.gpu.ID, Count: rpapi.NewOptInt(p.count)})
		out.CudaVersion = rpapi.NewOptNilString(p.cuda)
	}
	if p.holds() {
		out.Cost = rpapi.NewOptFloat64(p.cost)
	}
	if m, ok := p.req.Mounts.Get(); ok {
		out.Mounts = rpapi.NewOptMounts(rpapi.Mounts{Network: slices.Clone(m.Network)})
	}
	if p.started.IsZero() {
		out.StartedAt.SetToNull()
	} else {
		out.StartedAt = rpapi.NewOptNilDateTime(p.started)
	}
	if p.status == Running {
		out.Runtime = rpapi.NewOptNilRuntime(rpapi.Runtime{Ports: slices.Clone(p.ports)})
	} else {
		out.Runtime.SetToNull()
	}
	return out
}

// stopContainer stops a pod's container outside f.mu: the polite signal, the kill after the
// grace. The pod is busy meanwhile (its state stands still). f.mu is held on entry and on
// return.
func (f *Fake) stopContainer(p *pod) {
	ctr := p.ctr
	if ctr == nil {
		return
	}
	p.busy = true
	f.mu.Unlock()
	ctr.Stop(f.cfg.StopGrace)
	f.mu.Lock()
	p.busy, p.ctr = false, nil
	p.system("container stopped (status %d)", ctr.ExitCode())
}

// act applies an action to a pod, or says why it is not valid now (409). f.mu is held.
func (f *Fake) act(ctx context.Context, p *pod, a rpapi.PodAction) error {
	f.advancePod(p, f.clock.Now())
	if p.busy || !slices.Contains(actions(p.status), a) {
		return fmt.Errorf("action %s is not valid for a pod in status %s (valid: %s)", a, p.status, joinActions(actions(p.status)))
	}
	switch a {
	case rpapi.PodActionStop:
		f.stopContainer(p)
		p.status, p.since = Exited, f.clock.Now()
		p.system("pod stopped; its GPUs are released and its disk kept")
	case rpapi.PodActionStart:
		if g := p.gpu; g != nil && g.level(p.dc) == "NONE" {
			return errCapacity
		}
		p.status, p.since = Starting, f.clock.Now()
		p.system("pod starting again on its machine")
	case rpapi.PodActionRestart:
		f.stopContainer(p)
		p.status, p.since = Starting, f.clock.Now()
		p.system("pod restarting")
	case rpapi.PodActionTerminate:
		f.stopContainer(p)
		delete(f.pods, p.id)
	}
	return nil
}

// errCapacity is a start refused for lack of a free GPU on the pod's machine.
var errCapacity = fmt.Errorf("the machine this pod ran on has no free GPU now")

func joinActions(as []rpapi.PodAction) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = string(a)
	}
	return strings.Join(s, ", ")
}
