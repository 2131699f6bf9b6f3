// Package kubernetes runs Gantry's workers as Pods in a Kubernetes cluster: one bare Pod per
// worker (restartPolicy Never, no Deployment or Job), so that scaling down deletes exactly the
// idle worker and no controller is needed. The pool's capacity is the cluster's: the
// allocatable nvidia.com/gpu of the nodes that match the pool's selector, minus what other
// pods request there, kept current by watches; or, with Config.Capacity = CapacityCount, the
// pool's configured count, and then the pool touches nothing outside its namespace. Worker
// events come from a label-filtered pod informer.
//
// FLASHBOOT: a pod cannot be paused, so Suspend and Resume answer pool.ErrUnsupported
// and a retired worker's pod is deleted. Keeping retired pods running but unrouted would
// bring them back faster, but would hold their GPUs the whole time; Gantry does not pay that
// cost silently.
//
// Gantry must reach pod IPs (it runs in the cluster, or routes to the pod network): load-
// balancing workers are reached at the pod IP and the port they asked for.
//
// Network volumes are PersistentVolumeClaims that the workers' pods mount (volume.go).
package kubernetes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/gantryhq/gantry/adapters/kit"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// Labels every worker pod carries. The installation label keeps two Gantry installations
// sharing a namespace apart; the informers select on installation and pool.
const (
	LabelInstallation = "gantry.io/installation"
	LabelPool         = "gantry.io/pool"
	LabelEndpoint     = "gantry.io/endpoint"
	LabelWorker       = "gantry.io/worker"
	// AnnotationRevision keeps what the worker runs (WorkerSpec.Revision), so that a
	// restarted Gantry adopts only pods that still match their endpoint.
	AnnotationRevision = "gantry.io/revision"
)

// GPUResource is the extended resource GPU workers request (NVIDIA's device plugin).
const GPUResource corev1.ResourceName = "nvidia.com/gpu"

// GPUProductLabel is the node label (NVIDIA GPU Feature Discovery) that names a node's GPU
// type, e.g. NVIDIA-H100-80GB-HBM3.
const GPUProductLabel = "nvidia.com/gpu.product"

// Defaults of Config.
const (
	DefaultNamespace          = "default"
	DefaultInstallation       = "gantry"
	DefaultStopGrace          = 10 * time.Second
	DefaultUnschedulableAfter = 30 * time.Second
	DefaultShmGB              = 8
	DefaultQPS                = 50 // as kube-scheduler's; 500 pods start in about 10 s
	DefaultBurst              = 100
)

// Where a pool's capacity comes from (Config.Capacity).
const (
	// CapacityNodes is the cluster's: the allocatable resource of the pool's nodes minus
	// what other pods request there. It watches nodes and the pods of every namespace, so
	// Gantry's account needs list and watch on both cluster-wide (a ClusterRole).
	CapacityNodes = "nodes"
	// CapacityCount is the pool's configured count, fixed: the pool reads nothing outside
	// its namespace, and a Role there is all its account needs. A pod the cluster cannot
	// place still waits, throttled with the scheduler's reason.
	CapacityCount = "count"
)

// Credential is a registry login for pulling a private image.
type Credential struct {
	Username, Password string
	Server             string // the registry's host, e.g. ghcr.io
}

// Config configures a Pool. It is also a kubernetes pool's section in the config file
// (pools[].kubernetes, optional): the fields with a yaml key are read from there, and Build
// fills in the others (the client from Kubeconfig, the description, credentials and logger
// from the server). New validates it once.
type Config struct {
	// Pool describes the pool for the catalog; its count is the capacity until the node
	// watch has synced, and PerWorker should be a node's GPU count.
	Pool core.PoolInfo `yaml:"-"`
	// Client reaches the cluster (required by New; Build makes it from Kubeconfig, Context,
	// QPS and Burst). Set its rest.Config's QPS and Burst deliberately (DefaultQPS,
	// DefaultBurst): the pool watches, so it needs few requests per worker.
	Client kubernetes.Interface `yaml:"-"`
	// Kubeconfig is the kubeconfig file Build reaches the cluster with, with Context in it
	// ("" = its current one); "" = the in-cluster service account.
	Kubeconfig string `yaml:"kubeconfig"`
	Context    string `yaml:"context"`
	// Namespace the worker pods run in; default DefaultNamespace.
	Namespace string `yaml:"namespace"`
	// Installation names this Gantry installation in the pods' gantry.io/installation label;
	// default DefaultInstallation.
	Installation string `yaml:"installation"`
	// NodeSelector selects the pool's nodes. Default on GPU pools: GPUProductLabel = the
	// pool's GPU type with spaces as dashes ("NVIDIA H100 80GB HBM3" -> NVIDIA-H100-80GB-HBM3).
	NodeSelector map[string]string `yaml:"nodeSelector"`
	// Tolerations are added to the pods; a toleration of the nvidia.com/gpu taint is always
	// there (the ExtendedResourceToleration admission plugin is not enabled everywhere).
	Tolerations []Toleration `yaml:"tolerations"`
	// RuntimeClassName, PriorityClassName and ServiceAccount are set on the pods when given.
	// With ServiceAccount set its token is mounted; otherwise automountServiceAccountToken is
	// false (workers do not talk to the cluster).
	RuntimeClassName  string `yaml:"runtimeClassName"`
	PriorityClassName string `yaml:"priorityClassName"`
	ServiceAccount    string `yaml:"serviceAccount"`
	// Labels and Annotations are added to every pod (the gantry.io labels win).
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
	// CPU and Memory are the requests of a CPU pool's workers per slot ("1", "2Gi"); default
	// 1 CPU and 2Gi per slot.
	CPU    string `yaml:"cpu"`
	Memory string `yaml:"memory"`
	// ShmGB sizes /dev/shm (a memory-backed emptyDir), in GB; default DefaultShmGB.
	ShmGB int `yaml:"shmGb"`
	// StopGrace is the pods' termination grace period, in whole seconds; default
	// DefaultStopGrace.
	StopGrace time.Duration `yaml:"stopGrace"`
	// Capacity is where the pool's capacity comes from: CapacityNodes (the default: the
	// allocatable GPUs of its nodes minus other pods' requests, which needs list and watch on
	// nodes and on pods in every namespace) or CapacityCount (the pool's count: Gantry then
	// reads nothing outside Namespace, and a Role there is enough).
	Capacity string `yaml:"capacity"`
	// UnschedulableAfter is how long a pod may stay Pending and unschedulable before the
	// worker is reported waiting (throttled, with the cluster scheduler's message); default
	// DefaultUnschedulableAfter.
	UnschedulableAfter time.Duration `yaml:"unschedulableAfter"`
	// Credentials resolves an endpoint's registry id to a login, for the imagePullSecret the
	// pool manages (one Secret per registry id); nil = no private registries.
	Credentials func(ctx context.Context, id string) (Credential, error) `yaml:"-"`
	// WorkerURL is where the pods reach Gantry's worker API (scheme, host and optional path
	// prefix, e.g. http://gantry.gantry.svc:8080, a Service in front of it): the
	// worker-protocol URLs handed to the pods are rebased onto it. Build's default is the
	// server's publicUrl; empty = the URLs as the scheduler made them (Gantry's own address,
	// reachable only when pods share its network, as in tests).
	WorkerURL string `yaml:"workerUrl"`
	// QPS and Burst bound the requests of Build's client to the API server; default
	// DefaultQPS and DefaultBurst (500 pods start in about 10 s).
	QPS   float32 `yaml:"qps"`
	Burst int     `yaml:"burst"`
	// Volumes configures the PersistentVolumeClaims that keep network volumes (volume.go).
	Volumes VolumeConfig `yaml:"volumes"`
	// Log receives the pool's own errors; default slog.Default().
	Log *slog.Logger `yaml:"-"`
}

// Toleration is a pod toleration (corev1.Toleration's fields the config file sets).
type Toleration struct {
	Key      string `yaml:"key"`
	Operator string `yaml:"operator"` // Equal or Exists; default Equal
	Value    string `yaml:"value"`
	Effect   string `yaml:"effect"` // NoSchedule, PreferNoSchedule, NoExecute; "" = all
}

// Pool is a pool.Pool of worker pods. It is an Elastic pool (the cluster assigns the
// devices and its capacity changes), a WorkerLister and a LogSource.
type Pool struct {
	cfg      Config
	desc     core.PoolInfo
	selector labels.Selector // the pool's nodes
	mine     labels.Selector // the pool's pods

	factory  informers.SharedInformerFactory // the pool's pods
	cluster  informers.SharedInformerFactory // nodes, and pods that are not finished (CapacityNodes; else nil)
	pods     cache.SharedIndexInformer
	nodes    cache.SharedIndexInformer
	allPods  cache.SharedIndexInformer
	capacity atomic.Int64
	stop     context.CancelFunc

	mu      sync.Mutex
	workers map[string]*worker
}

// worker is one worker pod and what was reported of it.
type worker struct {
	id, endpoint string
	ports        []int // the ports it asked for (spec.PortEnv)
	events       *kit.Reporter
	created      time.Time

	// guarded by Pool.mu
	running  bool // WorkerRunning was reported
	waiting  bool // WorkerWaiting was reported (and no WorkerRunning since)
	stopping bool // Stop was called
	exited   bool // WorkerExited was reported
	exitErr  error
}

// New validates cfg, starts the pool's watches and waits for their caches.
func New(ctx context.Context, cfg Config) (*Pool, error) {
	if cfg.Client == nil {
		return nil, errors.New("kubernetes pool: Config.Client is required")
	}
	cfg.Namespace = cmp.Or(cfg.Namespace, DefaultNamespace)
	cfg.Installation = cmp.Or(cfg.Installation, DefaultInstallation)
	cfg.StopGrace = cmp.Or(cfg.StopGrace, DefaultStopGrace)
	cfg.UnschedulableAfter = cmp.Or(cfg.UnschedulableAfter, DefaultUnschedulableAfter)
	cfg.Capacity = cmp.Or(cfg.Capacity, CapacityNodes)
	cfg.ShmGB = cmp.Or(cfg.ShmGB, DefaultShmGB)
	cfg.CPU, cfg.Memory = cmp.Or(cfg.CPU, "1"), cmp.Or(cfg.Memory, "2Gi")
	cfg.Log = cmp.Or(cfg.Log, slog.Default())
	cfg.WorkerURL = strings.TrimRight(cfg.WorkerURL, "/")
	d, errs := kit.CheckPool(cfg.Pool, "kubernetes", nil, cfg.StopGrace)
	if cfg.StopGrace%time.Second != 0 {
		errs = append(errs, fmt.Errorf("stopGrace %v: want whole seconds (Kubernetes counts grace periods in seconds)", cfg.StopGrace))
	}
	if cfg.Capacity != CapacityNodes && cfg.Capacity != CapacityCount {
		errs = append(errs, fmt.Errorf("capacity %q: want %s (the nodes' allocatable GPUs; needs a ClusterRole) or %s (the pool's count; its namespace alone)",
			cfg.Capacity, CapacityNodes, CapacityCount))
	}
	if u, err := url.Parse(cfg.WorkerURL); cfg.WorkerURL != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
		errs = append(errs, fmt.Errorf("workerUrl %q: want http(s)://host[:port][/prefix]", cfg.WorkerURL))
	}
	if cfg.NodeSelector == nil && !d.CPU {
		cfg.NodeSelector = map[string]string{GPUProductLabel: ProductLabelValue(d.GPUType)}
	}
	sel, err := labels.ValidatedSelectorFromSet(cfg.NodeSelector)
	if err != nil {
		errs = append(errs, fmt.Errorf("nodeSelector: %w", err))
	}
	if _, _, err := resources(d, 1, cfg); err != nil {
		errs = append(errs, err)
	}
	if err := cfg.Volumes.check(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("kubernetes pool %q: %w", d.ID, err)
	}
	p := &Pool{cfg: cfg, desc: d, selector: sel, workers: map[string]*worker{},
		mine: labels.SelectorFromSet(labels.Set{LabelInstallation: cfg.Installation, LabelPool: d.ID})}
	p.capacity.Store(int64(d.GPUs))
	p.factory = informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = p.mine.String() }))
	p.pods = p.factory.Core().V1().Pods().Informer()
	synced := []cache.InformerSynced{p.pods.HasSynced}
	if cfg.Capacity == CapacityNodes {
		p.cluster = informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0)
		p.nodes = p.cluster.Core().V1().Nodes().Informer()
		p.allPods = informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0,
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.FieldSelector = "status.phase!=Succeeded,status.phase!=Failed"
			})).Core().V1().Pods().Informer()
		recount := cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { p.recount() },
			UpdateFunc: func(any, any) { p.recount() },
			DeleteFunc: func(any) { p.recount() },
		}
		for _, inf := range []cache.SharedIndexInformer{p.nodes, p.allPods} {
			if _, err := inf.AddEventHandler(recount); err != nil {
				return nil, fmt.Errorf("kubernetes pool %q: %w", d.ID, err)
			}
		}
		synced = append(synced, p.nodes.HasSynced, p.allPods.HasSynced)
	}
	if _, err := p.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { p.observe(o) },
		UpdateFunc: func(_, o any) { p.observe(o) },
		DeleteFunc: func(o any) { p.deleted(o) },
	}); err != nil {
		return nil, fmt.Errorf("kubernetes pool %q: %w", d.ID, err)
	}
	run, stop := context.WithCancel(context.Background())
	p.stop = stop
	go p.pods.Run(run.Done())
	if p.nodes != nil {
		go p.nodes.Run(run.Done())
		go p.allPods.Run(run.Done())
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		stop()
		return nil, fmt.Errorf("kubernetes pool %q: the watches did not sync: %w", d.ID, cmp.Or(ctx.Err(), errors.New("stopped")))
	}
	p.recount()
	go p.watchPending(run)
	return p, nil
}

// ProductLabelValue is the nvidia.com/gpu.product value of a GPU type as GPU Feature
// Discovery writes it: spaces become dashes.
func ProductLabelValue(gpuType string) string {
	b := []byte(gpuType)
	for i, c := range b {
		if c == ' ' {
			b[i] = '-'
		}
	}
	return string(b)
}

// Close stops the pool's watches; its pods keep running (Shutdown deletes them).
func (p *Pool) Close() error {
	p.stop()
	return nil
}

// Describe returns the pool's description, with its capacity now.
func (p *Pool) Describe() core.PoolInfo {
	d := p.desc
	d.CUDAVersions = append([]string(nil), d.CUDAVersions...)
	return d
}

// Capacity returns the GPUs (or CPU slots) the pool's workers may hold in all: the
// allocatable resource of the ready, schedulable nodes that match the selector, minus what
// pods that are not this pool's request there; with CapacityCount the pool's count
// (implements pool.Elastic).
func (p *Pool) Capacity() int { return int(p.capacity.Load()) }

// recount computes Capacity from the watches' caches (CapacityNodes; with CapacityCount it
// stays the pool's count).
func (p *Pool) recount() {
	if p.nodes == nil {
		return
	}
	res := GPUResource
	if p.desc.CPU {
		res = corev1.ResourceCPU
	}
	perSlot := int64(1)
	if p.desc.CPU {
		cpu, _, _ := resources(p.desc, 1, p.cfg)
		q := cpu[corev1.ResourceCPU]
		perSlot = max(q.MilliValue(), 1)
	}
	free := map[string]int64{}
	for _, o := range p.nodes.GetStore().List() {
		n := o.(*corev1.Node)
		if n.Spec.Unschedulable || !nodeReady(n) || !p.selector.Matches(labels.Set(n.Labels)) {
			continue
		}
		q := n.Status.Allocatable[res]
		free[n.Name] = q.MilliValue()
	}
	for _, o := range p.allPods.GetStore().List() {
		pod := o.(*corev1.Pod)
		if _, ok := free[pod.Spec.NodeName]; !ok || p.mine.Matches(labels.Set(pod.Labels)) {
			continue
		}
		for _, c := range pod.Spec.Containers {
			q := c.Resources.Requests[res]
			free[pod.Spec.NodeName] -= q.MilliValue()
		}
	}
	var total int64
	for _, f := range free {
		if p.desc.CPU {
			total += max(f, 0) / perSlot
		} else {
			total += max(f, 0) / 1000
		}
	}
	p.capacity.Store(total)
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Start creates the worker's pod and returns; the pod informer reports it running once it is
// Running and Ready.
func (p *Pool) Start(ctx context.Context, spec pool.WorkerSpec) error {
	if spec.ID == "" || spec.Report == nil {
		return fmt.Errorf("starting worker %q: the spec needs an ID and a Report", spec.ID)
	}
	pod, err := p.podSpec(ctx, spec)
	if err != nil {
		return fmt.Errorf("starting worker %s: %w", spec.ID, err)
	}
	w := &worker{id: spec.ID, endpoint: spec.Endpoint, events: kit.NewReporter(spec.Report), created: time.Now()}
	for _, port := range spec.PortEnv {
		w.ports = append(w.ports, port)
	}
	p.mu.Lock()
	if _, dup := p.workers[spec.ID]; dup {
		p.mu.Unlock()
		return fmt.Errorf("starting worker %s: the pool already runs a worker with this id", spec.ID)
	}
	p.workers[spec.ID] = w
	p.mu.Unlock()
	if _, err := p.cfg.Client.CoreV1().Pods(p.cfg.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		p.mu.Lock()
		delete(p.workers, spec.ID)
		p.mu.Unlock()
		return fmt.Errorf("starting worker %s: creating its pod: %w", spec.ID, err)
	}
	if o, ok, _ := p.pods.GetStore().GetByKey(p.cfg.Namespace + "/" + PodName(spec.ID)); ok {
		p.observe(o) // the informer saw it before the worker was registered
	}
	return nil
}

// PodName is the name of a worker's pod.
func PodName(worker string) string { return "gantry-" + worker }

// Stop deletes the worker's pod with the pool's grace period; the informer reports the exit.
func (p *Pool) Stop(ctx context.Context, id string) error {
	p.mu.Lock()
	w := p.workers[id]
	if w != nil {
		w.stopping = true
	}
	p.mu.Unlock()
	grace := int64(p.cfg.StopGrace / time.Second)
	err := p.cfg.Client.CoreV1().Pods(p.cfg.Namespace).Delete(ctx, PodName(id), metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("stopping worker %s: %w", id, err)
	}
	if apierrors.IsNotFound(err) && w != nil {
		p.exit(w, nil) // the pod was gone before the informer said so
	}
	return nil
}

// Suspend answers pool.ErrUnsupported: a pod cannot be paused (see the package doc).
func (p *Pool) Suspend(context.Context, string) error { return pool.ErrUnsupported }

// Resume answers pool.ErrUnsupported.
func (p *Pool) Resume(context.Context, string) error { return pool.ErrUnsupported }

// LiveWorkers lists the pool's worker pods: those Start created (Known) and those it found with
// its labels, left by an earlier run or another replica (implements pool.WorkerLister).
func (p *Pool) LiveWorkers(context.Context) ([]pool.LiveWorker, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []pool.LiveWorker
	for _, o := range p.pods.GetStore().List() {
		pod := o.(*corev1.Pod)
		id := pod.Labels[LabelWorker]
		if id == "" || pod.DeletionTimestamp != nil {
			continue
		}
		w := p.workers[id]
		if w != nil && w.exited {
			continue
		}
		out = append(out, pool.LiveWorker{ID: id, Endpoint: pod.Labels[LabelEndpoint],
			Started: pod.CreationTimestamp.Time, Known: w != nil, Revision: pod.Annotations[AnnotationRevision],
			Count: p.slots(pod)})
	}
	return out, nil
}

// slots is how many GPUs (or CPU slots) a worker pod holds.
func (p *Pool) slots(pod *corev1.Pod) int {
	if len(pod.Spec.Containers) == 0 {
		return 0
	}
	r := pod.Spec.Containers[0].Resources
	if !p.desc.CPU {
		q := r.Limits[GPUResource]
		return int(q.Value())
	}
	per, _, _ := resources(p.desc, 1, p.cfg)
	q, one := r.Requests[corev1.ResourceCPU], per[corev1.ResourceCPU]
	if one.MilliValue() <= 0 {
		return 0
	}
	return int(q.MilliValue() / one.MilliValue())
}

// Adopt takes over a worker pod this pool did not start (found by Workers): its events are
// reported from now on, WorkerRunning at once if it runs (implements pool.Adopter).
func (p *Pool) Adopt(_ context.Context, lw pool.LiveWorker, report func(pool.WorkerEvent)) error {
	o, ok, err := p.pods.GetStore().GetByKey(p.cfg.Namespace + "/" + PodName(lw.ID))
	if err != nil || !ok {
		return fmt.Errorf("adopting worker %s: its pod is gone", lw.ID)
	}
	pod := o.(*corev1.Pod)
	if pod.DeletionTimestamp != nil {
		return fmt.Errorf("adopting worker %s: its pod is being deleted", lw.ID)
	}
	w := &worker{id: lw.ID, endpoint: lw.Endpoint, events: kit.NewReporter(report), created: pod.CreationTimestamp.Time}
	for _, c := range pod.Spec.Containers {
		for _, port := range c.Ports {
			w.ports = append(w.ports, int(port.ContainerPort))
		}
	}
	p.mu.Lock()
	if _, dup := p.workers[lw.ID]; dup {
		p.mu.Unlock()
		return fmt.Errorf("adopting worker %s: the pool already has it", lw.ID)
	}
	p.workers[lw.ID] = w
	p.mu.Unlock()
	if o, ok, _ := p.pods.GetStore().GetByKey(p.cfg.Namespace + "/" + PodName(lw.ID)); ok {
		p.observe(o) // as it is now: the watch reports what follows
	} else {
		p.exit(w, &ExitError{Reason: "Deleted", Message: "the pod was deleted while Gantry adopted it"})
	}
	return nil
}

// Logs returns the last tail lines of the worker's container output, from pods/log
// (implements pool.LogSource).
func (p *Pool) Logs(ctx context.Context, id string, tail int) (io.ReadCloser, error) {
	lines := int64(tail)
	opts := &corev1.PodLogOptions{Container: "worker"}
	if tail > 0 {
		opts.TailLines = &lines
	}
	rc, err := p.cfg.Client.CoreV1().Pods(p.cfg.Namespace).GetLogs(PodName(id), opts).Stream(ctx)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("logs of worker %s: its pod is gone: %w", id, fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("logs of worker %s: %w", id, err)
	}
	return rc, nil
}

// Shutdown deletes the pods of the pool's workers and waits until each reported its exit or
// ctx ends.
func (p *Pool) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	var ids []string
	for id, w := range p.workers {
		if !w.exited {
			ids = append(ids, id)
		}
	}
	p.mu.Unlock()
	var errs []error
	for _, id := range ids {
		errs = append(errs, p.Stop(ctx, id))
	}
	for {
		p.mu.Lock()
		left := 0
		for _, w := range p.workers {
			if !w.exited {
				left++
			}
		}
		p.mu.Unlock()
		if left == 0 {
			return errors.Join(errs...)
		}
		select {
		case <-ctx.Done():
			return errors.Join(append(errs, fmt.Errorf("%d worker pods still exiting: %w", left, ctx.Err()))...)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// observe maps a pod's status to the worker's events.
func (p *Pool) observe(o any) {
	pod, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	stuck := p.volumeStuck(pod, time.Now()) // volume.go; before p.mu: it may read the pod's events
	p.mu.Lock()
	w := p.workers[pod.Labels[LabelWorker]]
	if w == nil || w.exited {
		p.mu.Unlock()
		return
	}
	st := State(pod, time.Now(), p.cfg.UnschedulableAfter)
	if stuck != nil && !st.Gone && !st.Running {
		st = PodState{Gone: true, Err: stuck}
	}
	switch {
	case st.Gone:
		err := st.Err
		if pod.DeletionTimestamp != nil && !w.stopping { // it ended because someone deleted it
			err = deletedByOthers(err)
		}
		p.mu.Unlock()
		p.exit(w, err)
		if pod.DeletionTimestamp == nil { // a bare pod stays until deleted
			// Off the watch's goroutine: under the client's rate limit a burst of exits would
			// otherwise hold back every event behind it.
			name, uid := pod.Name, pod.UID
			go func() {
				grace := int64(0)
				err := p.cfg.Client.CoreV1().Pods(p.cfg.Namespace).Delete(context.Background(), name,
					metav1.DeleteOptions{GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &uid}})
				if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
					p.cfg.Log.Error("deleting an exited worker's pod", "pod", name, "err", err)
				}
			}()
		}
		return
	case st.Running && !w.running:
		w.running, w.waiting = true, false
		addrs := map[int]string{}
		for _, port := range w.ports {
			addrs[port] = net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port))
		}
		w.events.Queue(pool.WorkerEvent{Worker: w.id, State: pool.WorkerRunning, At: time.Now(), Addrs: addrs})
	case st.Waiting != "" && !w.waiting && !w.running:
		w.waiting = true
		w.events.Queue(pool.WorkerEvent{Worker: w.id, State: pool.WorkerWaiting, At: time.Now(), Err: errors.New(st.Waiting)})
	}
	p.mu.Unlock()
	w.events.Flush()
}

// deleted reports the exit of a worker whose pod is gone.
func (p *Pool) deleted(o any) {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	pod, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	p.mu.Lock()
	w := p.workers[pod.Labels[LabelWorker]]
	p.mu.Unlock()
	if w == nil {
		return
	}
	var err error
	if st := State(pod, time.Now(), p.cfg.UnschedulableAfter); st.Gone {
		err = st.Err
	}
	p.mu.Lock()
	stopping := w.stopping
	p.mu.Unlock()
	if !stopping {
		err = deletedByOthers(err)
	}
	p.exit(w, err)
}

// deletedByOthers is the exit of a worker whose pod someone other than Gantry deleted. The
// kubelet kills a deleted pod's container, and the pod's last status (a kill: exit status 137)
// may reach the watch before, or with, the deletion: the deletion is the cause, and the
// status, when there is one, says how it ended.
func deletedByOthers(ended error) error {
	msg := "the pod was deleted by someone other than Gantry"
	if ended != nil {
		msg += "; it ended: " + ended.Error()
	}
	return &ExitError{Reason: "Deleted", Message: msg}
}

// exit reports WorkerExited once and forgets the worker.
func (p *Pool) exit(w *worker, err error) {
	p.mu.Lock()
	if w.exited {
		p.mu.Unlock()
		return
	}
	w.exited = true
	if w.stopping { // the contract: a worker stopped by Stop exits without an error
		err = nil
	}
	w.exitErr = err
	delete(p.workers, w.id)
	w.events.Queue(pool.WorkerEvent{Worker: w.id, State: pool.WorkerExited, At: time.Now(), Err: err, Stopped: w.stopping})
	p.mu.Unlock()
	w.events.Flush()
}

// watchPending re-reads pending pods every second, so that a pod that stays unschedulable
// past the bound is reported waiting even when nothing about it changes.
func (p *Pool) watchPending(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, o := range p.pods.GetStore().List() {
			if pod := o.(*corev1.Pod); pod.Status.Phase == corev1.PodPending {
				p.observe(pod)
			}
		}
	}
}

// ExitError is the error of a WorkerExited event: why the pod ended, in the cluster's words
// (Reason is OOMKilled, Error, Evicted, ErrImagePull, ImagePullBackOff, InvalidImageName,
// CrashLoopBackOff, NodeLost, Deleted, ...).
type ExitError struct {
	Reason   string
	Message  string
	ExitCode int32 // the container's exit status, when it ran
}

func (e *ExitError) Error() string {
	s := "pod " + e.Reason
	if e.ExitCode != 0 {
		s += " (exit status " + strconv.Itoa(int(e.ExitCode)) + ")"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// PodState is what a pod's status means for its worker.
type PodState struct {
	Running bool   // Running and Ready: the worker started
	Waiting string // Pending and unschedulable past the bound: the cluster scheduler's message
	Gone    bool   // the worker is gone
	Err     error  // why, when it did not exit with status 0
}

// State maps a pod's status to its worker's state at now; a pod unschedulable for longer than
// after is waiting.
func State(pod *corev1.Pod, now time.Time, after time.Duration) PodState {
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CrashLoopBackOff", "CreateContainerConfigError", "CreateContainerError":
				return PodState{Gone: true, Err: &ExitError{Reason: w.Reason, Message: w.Message}}
			}
		}
	}
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		e := &ExitError{Reason: cmp.Or(pod.Status.Reason, string(pod.Status.Phase)), Message: pod.Status.Message}
		for _, cs := range pod.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil {
				// A pod-level reason (Evicted, NodeLost, DeadlineExceeded) says more than its
				// container's Error.
				e.Reason, e.ExitCode = cmp.Or(pod.Status.Reason, t.Reason, e.Reason), t.ExitCode
				e.Message = cmp.Or(t.Message, e.Message)
			}
		}
		if pod.Status.Phase == corev1.PodSucceeded {
			return PodState{Gone: true}
		}
		return PodState{Gone: true, Err: e}
	case corev1.PodRunning:
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return PodState{Running: true}
			}
		}
	case corev1.PodPending:
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable &&
				now.Sub(pod.CreationTimestamp.Time) >= after {
				return PodState{Waiting: cmp.Or(c.Message, "the cluster has no node for the pod")}
			}
		}
	}
	return PodState{}
}

// Interface guards.
var (
	_ pool.Elastic        = (*Pool)(nil)
	_ pool.WorkerLister   = (*Pool)(nil)
	_ pool.WorkerURLOwner = (*Pool)(nil)
	_ pool.Adopter        = (*Pool)(nil)
	_ pool.LogSource      = (*Pool)(nil)
)

// OwnsWorkerURL implements pool.WorkerURLOwner: pods reach Gantry at workerUrl (default the
// server's publicUrl), a Service or load balancer in front of the replicas.
func (p *Pool) OwnsWorkerURL() bool { return p.cfg.WorkerURL != "" }
