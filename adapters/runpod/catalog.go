package runpod

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gantryhq/gantry/adapters/runpod/rpapi"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// readCatalog reads the pool's GPU type from RunPod's catalog with pod availability: its name,
// memory, the list price in the pool's cloud, the most GPUs one pod may have, the CUDA
// versions offered, and the stock level for the pool (in its cloud, for its CUDA versions
// when the config names some, and in its data centers when the config names some: the best
// of theirs).
func (p *Pool) readCatalog(ctx context.Context) error {
	res, err := p.bg.ListGpuTypes(ctx, rpapi.ListGpuTypesParams{
		Include: []rpapi.ListGpuTypesIncludeItem{rpapi.ListGpuTypesIncludeItemAVAILABILITY},
		Product: []rpapi.ListGpuTypesProductItem{rpapi.ListGpuTypesProductItemPOD},
		Count:   rpapi.NewOptInt(1), Cloud: rpapi.NewOptListGpuTypesCloud(rpapi.ListGpuTypesCloud(p.cfg.Cloud)),
		CudaVersions: p.poolCUDA(),
	})
	if err != nil {
		return fmt.Errorf("reading RunPod's GPU catalog: %w", err)
	}
	var list rpapi.GpuTypeList
	switch r := res.(type) {
	case *rpapi.GpuTypeListHeaders:
		p.noteHealth(nil)
		list = r.Response
	case *rpapi.ProblemStatusCodeWithHeaders:
		err := apiError("listGpuTypes", r)
		p.noteHealth(err)
		return fmt.Errorf("reading RunPod's GPU catalog: %w", err)
	default:
		return unexpected("listGpuTypes", res)
	}
	var ids []string
	for _, g := range list.Gpus {
		ids = append(ids, g.ID)
		if g.ID != p.desc.GPUType {
			continue
		}
		info := gpuInfo{name: g.Name, memory: g.Memory, price: g.Price.Secure, maxCount: g.MaxCount.Secure,
			stock: p.stockOf(&g), held: p.held()}
		if p.cfg.Cloud == "COMMUNITY" {
			info.price, info.maxCount = g.Price.Community, g.MaxCount.Community
		}
		for _, v := range g.CudaVersions {
			info.cuda = append(info.cuda, v.Version)
		}
		if info.cuda, err = core.SortCUDAVersions(info.cuda); err != nil {
			return fmt.Errorf("RunPod's catalog for %s: %w", g.ID, err)
		}
		p.mu.Lock()
		if p.gpu.stock != info.stock {
			p.log.Info("RunPod's stock of the pool's GPU type changed", "gpuType", g.ID, "was", p.gpu.stock, "now", info.stock)
		}
		p.gpu, p.catalog = info, p.clock.Now()
		p.completeDescription()
		p.mu.Unlock()
		return nil
	}
	slices.Sort(ids)
	return fmt.Errorf("gpuType %q is not in RunPod's GPU catalog (it has: %s)", p.desc.GPUType, strings.Join(ids, ", "))
}

// levels orders the catalog's availability levels.
var levels = map[rpapi.Availability]int{rpapi.AvailabilityNONE: 0, rpapi.AvailabilityLOW: 1, rpapi.AvailabilityMEDIUM: 2, rpapi.AvailabilityHIGH: 3}

// stockOf is a catalog entry's stock level for the pool: the overall one, or with data
// centers configured the best among them (RunPod lists only the data centers with the
// configuration on offer; one not listed has none).
func (p *Pool) stockOf(g *rpapi.GpuType) string {
	if len(p.cfg.DataCenters) == 0 {
		return string(g.Availability.Or(rpapi.AvailabilityNONE))
	}
	best := rpapi.AvailabilityNONE
	for _, dc := range g.DataCenters {
		if slices.Contains(p.cfg.DataCenters, dc.ID) && levels[dc.Availability] > levels[best] {
			best = dc.Availability
		}
	}
	return string(best)
}

// held is how many GPUs the pool's pods hold (suspended ones included: their workers keep
// their place).
func (p *Pool) held() int {
	n := 0
	for _, w := range p.live.All() {
		n += w.count
	}
	return n
}

// ThrottledError is a start refused for now, not failed: the cost guard's caps are reached,
// or RunPod has no machine for the pod. It wraps pool.ErrNoCapacity.
type ThrottledError struct{ Reason string }

func (e *ThrottledError) Error() string { return "throttled: " + e.Reason }

// Unwrap makes a throttled start an ErrNoCapacity.
func (e *ThrottledError) Unwrap() error { return pool.ErrNoCapacity }

// guard checks a start (or a resume) of a pod of gpus GPUs against the catalog's stock, the
// pool's count and the cost guard, not counting worker self: a start keeps the pool's pods
// within its count and within what the stock level counts as free (Capacity), its pods within
// MaxPods, and its running pods' list prices within MaxSpendPerHour.
func (p *Pool) guard(self *worker, gpus int, resume bool) error {
	p.mu.Lock()
	g, count := p.gpu, p.desc.GPUs
	free := p.stockGPUs(g.stock)
	p.mu.Unlock()
	if g.stock == "NONE" {
		return &ThrottledError{Reason: fmt.Sprintf("RunPod has no %s in stock in the %s cloud%s (catalog read at %s)",
			p.desc.GPUType, p.cfg.Cloud, p.where(), p.catalogTime())}
	}
	pods, held, spend := 0, 0, 0.0
	for _, w := range p.live.All() {
		if w == self {
			continue
		}
		w.mu.Lock()
		pods++
		held += w.count
		if w.phase != suspended && w.phase != exited {
			spend += w.price
		}
		w.mu.Unlock()
	}
	if !resume && held+gpus > count {
		return &ThrottledError{Reason: fmt.Sprintf("the pool rents at most %d GPU(s) at once (its count); it holds %d and the pod asks %d", count, held, gpus)}
	}
	if !resume && g.stock != "" && held+gpus > g.held+free {
		return &ThrottledError{Reason: fmt.Sprintf("RunPod's catalog shows %s stock of %s in the %s cloud%s (read at %s), counted as %d GPU(s) free besides the %d the pool held then; it holds %d and the pod asks %d",
			g.stock, p.desc.GPUType, p.cfg.Cloud, p.where(), p.catalogTime(), free, g.held, held, gpus)}
	}
	if max := p.cfg.MaxPods; max > 0 && pods >= max && !resume {
		return &ThrottledError{Reason: fmt.Sprintf("the pool's cost guard allows %d pod(s) at once (maxPods), and it has %d", max, pods)}
	}
	cost := g.price * float64(gpus)
	if max := p.cfg.MaxSpendPerHour; max > 0 && spend+cost > max+1e-9 {
		return &ThrottledError{Reason: fmt.Sprintf("the pool's cost guard allows %.2f USD/h (maxSpendPerHour); its running pods cost %.2f and one more %.2f", max, spend, cost)}
	}
	return nil
}

// where names the pool's data centers for a message; "" when it may use any.
func (p *Pool) where() string {
	if len(p.cfg.DataCenters) == 0 {
		return ""
	}
	return " in " + strings.Join(p.cfg.DataCenters, ", ")
}

func (p *Pool) catalogTime() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.catalog.UTC().Format("15:04:05Z")
}

// price is what a pod of gpus GPUs costs per hour at the catalog's list price.
func (p *Pool) price(gpus int) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gpu.price * float64(gpus)
}

// ours reports whether a listed pod is one of this installation's for this pool, and which
// worker it runs.
func (p *Pool) ours(pod *rpapi.Pod) (worker string, ok bool) {
	env, _ := pod.Env.Get()
	if env[EnvInstallation] != p.cfg.Installation || env[EnvPool] != p.desc.ID || env[EnvWorker] == "" {
		return "", false
	}
	return env[EnvWorker], true
}

// LiveWorkers lists the pods of this installation and pool as workers: those Start accepted
// (Known) and those an earlier run, or another replica, left. The scheduler stops the ones
// it did not start (Stop terminates a pod it finds this way).
func (p *Pool) LiveWorkers(ctx context.Context) ([]pool.LiveWorker, error) {
	pods, err := p.listPods(ctx)
	if err != nil {
		return nil, fmt.Errorf("runpod pool %s: listing its pods: %w", p.desc.ID, err)
	}
	var out []pool.LiveWorker
	for i := range pods {
		pod := &pods[i]
		id, ok := p.ours(pod)
		if !ok {
			continue
		}
		_, known := p.live.Get(id)
		env, _ := pod.Env.Get()
		out = append(out, pool.LiveWorker{ID: id, Endpoint: env[EnvEndpoint], Started: pod.CreatedAt, Known: known})
	}
	return out, nil
}

// terminateFound terminates the pods of worker id that this pool did not start (found by
// their GANTRY_* variables).
func (p *Pool) terminateFound(ctx context.Context, id string) error {
	pods, err := p.listPods(ctx)
	if err != nil {
		return fmt.Errorf("stopping worker %s: listing pods: %w", id, err)
	}
	var errs []error
	for i := range pods {
		if w, ok := p.ours(&pods[i]); ok && w == id {
			p.log.Warn("terminating a pod this run did not start", "pod", pods[i].ID, "worker", id, "status", pods[i].Status)
			if err := p.deletePod(ctx, p.api, pods[i].ID); err != nil && !isNotFound(err) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
