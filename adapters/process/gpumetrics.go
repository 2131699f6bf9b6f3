package process

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultGPUSampleEvery is the least time between two nvidia-smi runs of a GPU sampler.
const DefaultGPUSampleEvery = 10 * time.Second

// gpuSampleTimeout bounds one nvidia-smi run.
const gpuSampleTimeout = 5 * time.Second

// GPUUsage is one GPU's use as nvidia-smi reports it.
type GPUUsage struct {
	Index                       int
	UUID                        string
	Utilization                 float64 // 0..1, the share of the last sample period a kernel ran
	MemoryUsedMB, MemoryTotalMB int
}

// UsageArgs are the nvidia-smi arguments whose CSV output ParseUsage reads.
var UsageArgs = []string{"--query-gpu=index,uuid,utilization.gpu,memory.used,memory.total", "--format=csv,noheader,nounits"}

// ParseUsage reads `nvidia-smi --query-gpu=index,uuid,utilization.gpu,memory.used,memory.total
// --format=csv,noheader,nounits`. A field nvidia-smi cannot tell ("[N/A]", "[Not Supported]")
// is read as 0.
func ParseUsage(csv string) ([]GPUUsage, error) {
	num := func(s string) float64 {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return 0
		}
		return v
	}
	var out []GPUUsage
	err := csvRows(csv, 5, func(line string, f []string) error {
		idx, err := strconv.Atoi(f[0])
		if err != nil {
			return fmt.Errorf("nvidia-smi line %q: index %q is not a number", line, f[0])
		}
		out = append(out, GPUUsage{Index: idx, UUID: f[1], Utilization: num(f[2]) / 100,
			MemoryUsedMB: int(num(f[3])), MemoryTotalMB: int(num(f[4]))})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GPUSampler runs nvidia-smi at most once per Every and keeps the last sample: scrapes of
// /metrics, however frequent, cost at most one nvidia-smi run per interval. The zero value
// samples with the nvidia-smi on PATH every DefaultGPUSampleEvery.
type GPUSampler struct {
	// Path is the nvidia-smi binary; "" = looked up on PATH at the first sample.
	Path string
	// Every is the least time between two runs; 0 = DefaultGPUSampleEvery.
	Every time.Duration

	mu    sync.Mutex
	at    time.Time // of the last run, successful or not
	last  []GPUUsage
	err   error
	found bool
}

// Sample returns the last sample, running nvidia-smi first when the last run is older than
// Every. Without nvidia-smi it returns an error, and the metrics are absent.
func (s *GPUSampler) Sample(ctx context.Context) ([]GPUUsage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	every := s.Every
	if every <= 0 {
		every = DefaultGPUSampleEvery
	}
	if !s.at.IsZero() && time.Since(s.at) < every {
		return s.last, s.err
	}
	s.at = time.Now()
	if !s.found {
		if s.Path == "" {
			p, err := exec.LookPath("nvidia-smi")
			if err != nil {
				s.last, s.err = nil, fmt.Errorf("no nvidia-smi on PATH: %w", err)
				return nil, s.err
			}
			s.Path = p
		}
		s.found = true
	}
	ctx, cancel := context.WithTimeout(ctx, gpuSampleTimeout)
	defer cancel()
	csv, err := exec.CommandContext(ctx, s.Path, UsageArgs...).Output()
	if err != nil {
		s.last, s.err = nil, fmt.Errorf("nvidia-smi: %w", err)
		return nil, s.err
	}
	s.last, s.err = ParseUsage(string(csv))
	return s.last, s.err
}

var (
	gpuUtilDesc = prometheus.NewDesc("gantry_worker_gpu_utilization_ratio",
		"Share of nvidia-smi's last sample period in which a kernel ran on a worker's GPU (0 to 1); process pools, sampled at most every 10 s.",
		[]string{"pool", "worker", "gpu"}, nil)
	gpuMemDesc = prometheus.NewDesc("gantry_worker_gpu_memory_used_bytes",
		"Memory in use on a worker's GPU (by every process on it), as nvidia-smi reports it; process pools, sampled at most every 10 s.",
		[]string{"pool", "worker", "gpu"}, nil)
)

// Collector returns the GPU use of the pool's workers as a Prometheus collector, one series
// per worker and GPU it holds (labelled with the GPU's UUID, or its machine index), sampled
// with s; nil for a pool of CPU slots. Where nvidia-smi is missing or fails, it sends nothing.
func (p *Pool) Collector(s *GPUSampler) prometheus.Collector {
	if p.desc.CPU {
		return nil
	}
	return &gpuCollector{p: p, s: s}
}

type gpuCollector struct {
	p *Pool
	s *GPUSampler
}

func (c *gpuCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- gpuUtilDesc
	ch <- gpuMemDesc
}

func (c *gpuCollector) Collect(ch chan<- prometheus.Metric) {
	usage, err := c.s.Sample(context.Background())
	if err != nil || len(usage) == 0 {
		return
	}
	byName := make(map[string]*GPUUsage, 2*len(usage))
	for i := range usage {
		u := &usage[i]
		byName[strconv.Itoa(u.Index)] = u
		if u.UUID != "" {
			byName[u.UUID] = u
		}
	}
	pool := c.p.desc.ID
	for _, w := range c.p.live.All() {
		for _, i := range w.gpus {
			name := strconv.Itoa(i)
			if c.p.devices != nil && i < len(c.p.devices) {
				name = c.p.devices[i]
			}
			u := byName[name]
			if u == nil {
				continue
			}
			ch <- prometheus.MustNewConstMetric(gpuUtilDesc, prometheus.GaugeValue, u.Utilization, pool, w.id, name)
			ch <- prometheus.MustNewConstMetric(gpuMemDesc, prometheus.GaugeValue, float64(u.MemoryUsedMB)*(1<<20), pool, w.id, name)
		}
	}
}
