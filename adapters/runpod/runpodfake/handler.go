package runpodfake

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/gantryhq/gantry/adapters/runpod/rpapi"
	"github.com/gantryhq/gantry/core"
)

// handler implements the generated server's operations on the fake.
type handler struct{ f *Fake }

var _ rpapi.Handler = handler{}

// problem is an error answer with RunPod's problem+json body.
func problem(status int, detail string, errs ...string) *rpapi.ProblemStatusCodeWithHeaders {
	return &rpapi.ProblemStatusCodeWithHeaders{StatusCode: status,
		Response: rpapi.Problem{Title: http.StatusText(status), Status: status, Detail: detail, Errors: errs}}
}

// writeProblem writes an error answer outside the generated server (before it runs).
func writeProblem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{http.StatusText(status), status, detail})
}

// decodeError answers a request the generated server could not decode or validate with 422,
// as RunPod answers a body that breaks the contract.
func (f *Fake) decodeError(_ context.Context, w http.ResponseWriter, _ *http.Request, err error) {
	writeProblem(w, http.StatusUnprocessableEntity, err.Error())
}

// lockPod locks the fake and returns pod id moved on to the clock's time, or the 404 for no
// such pod. The caller unlocks f.mu either way.
func (f *Fake) lockPod(id string) (*pod, *rpapi.ProblemStatusCodeWithHeaders) {
	f.mu.Lock()
	p := f.pods[id]
	if p == nil {
		return nil, problem(http.StatusNotFound, fmt.Sprintf("pod %q not found", id))
	}
	f.advancePod(p, f.clock.Now())
	return p, nil
}

// CreatePod checks the body's cross-field rules (400), places the pod (400 for no capacity)
// and creates it PROVISIONING.
func (h handler) CreatePod(_ context.Context, req *rpapi.CreatePod) (rpapi.CreatePodRes, error) {
	f := h.f
	gpu, hasGPU := req.Gpu.Get()
	if hasGPU == req.CPU.Set {
		return problem(http.StatusBadRequest, "exactly one of gpu or cpu must be set"), nil
	}
	if !hasGPU {
		return problem(http.StatusBadRequest, "this fake offers no CPU flavors: set gpu"), nil
	}
	if len(gpu.AllowedCudaVersions) > 0 && gpu.MinCudaVersion.Set {
		return problem(http.StatusBadRequest, "gpu.allowedCudaVersions and gpu.minCudaVersion are mutually exclusive"), nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.gpus[gpu.ID]
	if g == nil {
		return problem(http.StatusBadRequest, fmt.Sprintf("unknown GPU type %q", gpu.ID)), nil
	}
	count := gpu.Count.Or(1)
	if count > g.MaxCount {
		return problem(http.StatusBadRequest, fmt.Sprintf("%d GPUs of %s asked; a pod has at most %d", count, g.ID, g.MaxCount)), nil
	}
	if len(f.failNext) > 0 {
		detail := f.failNext[0]
		f.failNext = f.failNext[1:]
		return problem(http.StatusBadRequest, detail), nil
	}
	var offered []string
	for _, v := range g.CUDA {
		if len(gpu.AllowedCudaVersions) == 0 || slices.Contains(gpu.AllowedCudaVersions, v) {
			offered = append(offered, v)
		}
	}
	offered, _ = core.SortCUDAVersions(offered)
	if len(offered) == 0 {
		return problem(http.StatusBadRequest, fmt.Sprintf("no machine with %s runs CUDA %s", g.ID, strings.Join(gpu.AllowedCudaVersions, " or "))), nil
	}
	volumeDC, prob := f.checkMounts(req)
	if prob != nil {
		return prob, nil
	}
	allowed := g.DataCenters
	if len(req.DataCenterIds) > 0 {
		allowed = slices.DeleteFunc(slices.Clone(req.DataCenterIds), func(dc string) bool { return !slices.Contains(g.DataCenters, dc) })
		if len(allowed) == 0 {
			return problem(http.StatusBadRequest, fmt.Sprintf("%s is not offered in %s", g.ID, strings.Join(req.DataCenterIds, ", "))), nil
		}
	}
	if volumeDC != "" { // a pod mounting a network volume runs in the volume's data center
		if !slices.Contains(allowed, volumeDC) {
			return problem(http.StatusBadRequest, fmt.Sprintf("the network volume is in %s, where %s is not offered or not allowed", volumeDC, g.ID)), nil
		}
		allowed = []string{volumeDC}
	}
	i := slices.IndexFunc(allowed, func(dc string) bool { return g.level(dc) != "NONE" })
	if i < 0 {
		return problem(http.StatusBadRequest, "There are no longer any instances available with the requested specifications. Please refresh and try again."), nil
	}
	dc := allowed[i]
	price := g.Price
	if req.Cloud.Or(rpapi.CloudSECURE) == rpapi.CloudCOMMUNITY {
		price *= 0.7
	}
	now := f.clock.Now()
	f.seq++
	p := &pod{seq: f.seq, id: fmt.Sprintf("fake%06d%s", f.seq, strings.ToLower(core.NewID(4))), req: *req,
		status: Provisioning, since: now, created: now, gpu: g, count: count, cuda: offered[len(offered)-1], dc: dc,
		cost: price * float64(count), fail: f.failStart[req.Image]}
	for i, port := range req.Ports {
		n, proto, _ := strings.Cut(port, "/")
		priv, err := strconv.Atoi(n)
		if err != nil {
			return problem(http.StatusBadRequest, fmt.Sprintf("ports[%d] %q is not port/protocol", i, port)), nil
		}
		if proto == "tcp" { // a public port on the machine's address (nothing listens there in the fake)
			p.ports = append(p.ports, rpapi.RuntimePort{Private: rpapi.NewOptInt(priv), Public: rpapi.NewOptNilInt(20000 + f.seq*10 + i),
				Type: rpapi.NewOptString("tcp"), IP: rpapi.NewOptNilString("127.0.0.1")})
		}
	}
	p.system("pod created: %d x %s in %s, %s cloud", count, g.ID, dc, req.Cloud.Or(rpapi.CloudSECURE))
	f.pods[p.id] = p
	return &rpapi.PodHeaders{Response: p.api()}, nil
}

// ListPods lists the pods that exist.
func (h handler) ListPods(_ context.Context, _ rpapi.ListPodsParams) (rpapi.ListPodsRes, error) {
	f := h.f
	f.mu.Lock()
	defer f.mu.Unlock()
	f.advance(f.clock.Now())
	out := rpapi.PodList{Pods: []rpapi.Pod{}}
	for _, p := range f.sorted() {
		out.Pods = append(out.Pods, p.api())
	}
	return &rpapi.PodListHeaders{Response: out}, nil
}

// GetPod answers one pod, or 404.
func (h handler) GetPod(_ context.Context, params rpapi.GetPodParams) (rpapi.GetPodRes, error) {
	f := h.f
	p, missing := f.lockPod(params.ID)
	defer f.mu.Unlock()
	if missing != nil {
		return missing, nil
	}
	return &rpapi.PodHeaders{Response: p.api()}, nil
}

// DeletePod terminates a pod (its container stopped first), or answers 404.
func (h handler) DeletePod(ctx context.Context, params rpapi.DeletePodParams) (rpapi.DeletePodRes, error) {
	f := h.f
	p, missing := f.lockPod(params.ID)
	defer f.mu.Unlock()
	if missing != nil {
		return missing, nil
	}
	if err := f.act(ctx, p, rpapi.PodActionTerminate); err != nil {
		return problem(http.StatusConflict, err.Error()), nil
	}
	return &rpapi.DeletePodNoContent{}, nil
}

// PodAction applies an action valid in the pod's status, or answers 409 (404 for no pod).
func (h handler) PodAction(ctx context.Context, req *rpapi.PodActionRequest, params rpapi.PodActionParams) (rpapi.PodActionRes, error) {
	f := h.f
	p, missing := f.lockPod(params.ID)
	defer f.mu.Unlock()
	if missing != nil {
		return missing, nil
	}
	if err := f.act(ctx, p, req.Action); err != nil {
		if errors.Is(err, errCapacity) {
			return problem(http.StatusBadRequest, err.Error()), nil
		}
		return problem(http.StatusConflict, err.Error()), nil
	}
	if req.Action == rpapi.PodActionTerminate {
		return &rpapi.PodActionNoContent{}, nil
	}
	return &rpapi.PodHeaders{Response: p.api()}, nil
}

// GetPodLogs answers the last lines of a pod's log as server-sent events.
func (h handler) GetPodLogs(_ context.Context, params rpapi.GetPodLogsParams) (rpapi.GetPodLogsRes, error) {
	f := h.f
	p, missing := f.lockPod(params.ID)
	defer f.mu.Unlock()
	if missing != nil {
		return missing, nil
	}
	lines := p.log
	if n := params.Tail.Or(100); len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	var b bytes.Buffer
	ts := f.clock.Now().UTC().Format("2006-01-02T15:04:05Z")
	for i, l := range lines {
		source := "container"
		if rest, ok := strings.CutPrefix(l, "[system] "); ok {
			source, l = "system", rest
		}
		if s, ok := params.Source.Get(); ok && string(s) != source {
			continue
		}
		data, _ := json.Marshal(map[string]string{"source": source, "line": l, "ts": ts})
		fmt.Fprintf(&b, "id: %s/%012d\ndata: %s\n\n", ts, i, data)
	}
	return &rpapi.GetPodLogsOKHeaders{Response: rpapi.GetPodLogsOK{Data: &b}}, nil
}

// ListGpuTypes answers the catalog; with include=AVAILABILITY (which needs product) it adds
// stock, data centers and CUDA versions.
func (h handler) ListGpuTypes(_ context.Context, params rpapi.ListGpuTypesParams) (rpapi.ListGpuTypesRes, error) {
	f := h.f
	avail := slices.Contains(params.Include, rpapi.ListGpuTypesIncludeItemAVAILABILITY)
	if avail && len(params.Product) == 0 {
		return problem(http.StatusBadRequest, "include=AVAILABILITY needs product"), nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := rpapi.GpuTypeList{Gpus: []rpapi.GpuType{}}
	ids := make([]string, 0, len(f.gpus))
	for id := range f.gpus {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		g := f.gpus[id]
		t := rpapi.GpuType{ID: g.ID, Name: g.Name, Memory: g.MemoryGB, Secure: rpapi.NewOptBool(true), Community: rpapi.NewOptBool(true),
			Price:    rpapi.GpuTypePrice{Secure: g.Price, Community: g.Price * 0.7},
			MaxCount: rpapi.GpuTypeMaxCount{Secure: g.MaxCount, Community: g.MaxCount}}
		if avail {
			// Every machine of the type runs each of its CUDA versions, so a cudaVersions
			// filter leaves the stock as it is, or none when it names none of them.
			cuda := slices.DeleteFunc(slices.Clone(g.CUDA), func(v string) bool {
				return len(params.CudaVersions) > 0 && !slices.Contains(params.CudaVersions, v)
			})
			none := params.Count.Or(1) > g.MaxCount || len(cuda) == 0
			level := func(l string) rpapi.Availability {
				if none {
					return rpapi.AvailabilityNONE
				}
				return rpapi.Availability(l)
			}
			t.Availability = rpapi.NewOptAvailability(level(g.best()))
			for _, dc := range g.DataCenters { // none at all when no configuration is on offer
				if !none {
					t.DataCenters = append(t.DataCenters, rpapi.GpuTypeDataCentersItem{ID: dc, Availability: level(g.level(dc))})
				}
			}
			for _, v := range cuda {
				t.CudaVersions = append(t.CudaVersions, rpapi.GpuTypeCudaVersionsItem{Version: v, Available: level(g.best()) != rpapi.AvailabilityNONE})
			}
		}
		out.Gpus = append(out.Gpus, t)
	}
	return &rpapi.GpuTypeListHeaders{Response: out}, nil
}
