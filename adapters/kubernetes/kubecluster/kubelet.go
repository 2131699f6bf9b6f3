package kubecluster

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"github.com/gantryhq/gantry/adapters/adaptertest"
)

// GPUResource is the extended resource the fake nodes advertise (NVIDIA's device plugin).
const GPUResource corev1.ResourceName = "nvidia.com/gpu"

// Node is a fake node the test kubelet owns.
type Node struct {
	Name string
	// GPUs is the node's allocatable nvidia.com/gpu. A node with GPUs carries the
	// nvidia.com/gpu:NoSchedule taint, as GPU nodes commonly do, unless NoTaint.
	GPUs    int
	NoTaint bool
	// Product is its nvidia.com/gpu.product label (GPU Feature Discovery), e.g.
	// NVIDIA-H100-80GB-HBM3.
	Product string
	// CPU and Memory are its allocatable CPU and memory; default "64" and "512Gi".
	CPU, Memory string
	Labels      map[string]string
}

// KubeletConfig configures a Kubelet.
type KubeletConfig struct {
	// Images maps an image to its command (entrypoint and arguments); the container's args
	// follow it. A pod of an image not here fails with ErrImagePull, as an image that does not
	// exist.
	Images map[string][]string
	// Env is added to every process's environment ("K=V"), under the pod's own.
	Env []string
	// Pull is how long pulling an image takes.
	Pull time.Duration
	// NoProcess runs no process: a pod becomes Running and Ready at once and runs until it is
	// deleted. For measuring the control plane apart from process start.
	NoProcess bool
	// Volumes, when set, is a host directory under which the kubelet provisions the claims of
	// StorageClass and mounts them into its pods (volumes.go).
	Volumes string
}

// Kubelet is a test kubelet for fake nodes: it watches the pods bound to its nodes, runs
// each pod's container as a local process with the pod's environment, reports the pod's
// status as a kubelet does (Running and Ready; Succeeded or Failed with the container's exit
// status and reason), honours deletion with the pod's grace period and then removes the pod,
// and serves the containers' logs to the API server (pods/log); with KubeletConfig.Volumes it
// provisions claims as host directories and hands each pod its mounts (volumes.go). It can
// inject faults: a failed image pull (an unknown image), OOMKilled, eviction and the loss of
// a node. It is not a real kubelet: no cgroups, no network namespaces (every pod's IP is
// 127.0.0.1), no probes.
type Kubelet struct {
	c    *Cluster
	cfg  KubeletConfig
	logs *httptest.Server
	port int32

	mu    sync.Mutex
	nodes map[string]bool      // the nodes it owns
	pods  map[types.UID]*run   // the pods it has seen
	lost  map[string]time.Time // lost nodes
	ended map[string]time.Time // namespace/name -> when its container's end was reported
	stop  context.CancelFunc
	wg    sync.WaitGroup
}

// run is one pod on a fake node.
type run struct {
	ns, name, node string
	uid            types.UID

	deleting chan struct{} // closed when the pod is being deleted
	gone     chan struct{} // closed when the pod has left the API server
	killed   chan struct{} // closed when a fault ends the container
	delOnce  sync.Once
	goneOnce sync.Once
	killOnce sync.Once
	grace    time.Duration // set before deleting is closed

	mu      sync.Mutex
	proc    *adaptertest.Process
	reason  string    // the reason a fault gives the container's end (OOMKilled, Evicted, NodeLost)
	started time.Time // when its process started
	lines   []string
	dropped int           // lines trimmed from the front of lines
	done    bool          // the container ended: no more lines
	more    chan struct{} // closed and replaced when a line is added or the container ends
}

// maxLines is how many lines of a container's output the kubelet keeps.
const maxLines = 10000

// NewKubelet starts a test kubelet for the cluster; it stops its pods' processes when the test
// ends. Add nodes with AddNode.
func NewKubelet(t testing.TB, c *Cluster, cfg KubeletConfig) *Kubelet {
	t.Helper()
	k := &Kubelet{c: c, cfg: cfg, nodes: map[string]bool{}, pods: map[types.UID]*run{}, lost: map[string]time.Time{},
		ended: map[string]time.Time{}}
	// The API server reaches a kubelet's /containerLogs over HTTPS at the node's address and
	// kubelet port; it does not check the kubelet's certificate unless told a CA.
	k.logs = httptest.NewUnstartedServer(http.HandlerFunc(k.serveLogs))
	k.logs.StartTLS()
	u, _ := url.Parse(k.logs.URL)
	port, _ := strconv.Atoi(u.Port())
	k.port = int32(port)

	ctx, cancel := context.WithCancel(context.Background())
	k.stop = cancel
	factory := informers.NewSharedInformerFactoryWithOptions(c.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermNotEqualSelector("spec.nodeName", "").String()
		}))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { k.sync(ctx, o.(*corev1.Pod)) },
		UpdateFunc: func(_, o any) { k.sync(ctx, o.(*corev1.Pod)) },
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if pod, ok := o.(*corev1.Pod); ok {
				k.removed(pod)
			}
		},
	}); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("the test kubelet's pod watch did not sync")
	}
	stopClaims := func() {}
	if cfg.Volumes != "" {
		stop, err := k.startProvisioner(ctx)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		stopClaims = stop
	}
	t.Cleanup(func() {
		cancel()
		factory.Shutdown()
		stopClaims()
		k.mu.Lock()
		runs := make([]*run, 0, len(k.pods))
		for _, r := range k.pods {
			runs = append(runs, r)
		}
		k.mu.Unlock()
		for _, r := range runs {
			r.goneOnce.Do(func() { close(r.gone) })
		}
		k.wg.Wait()
		k.logs.Close()
	})
	return k
}

// AddNode registers a fake node that is Ready, with its GPUs, labels and taint.
func (k *Kubelet) AddNode(ctx context.Context, n Node) error {
	if n.CPU == "" {
		n.CPU = "64"
	}
	if n.Memory == "" {
		n.Memory = "512Gi"
	}
	cpu, err := resource.ParseQuantity(n.CPU)
	if err != nil {
		return fmt.Errorf("node %s: cpu: %w", n.Name, err)
	}
	mem, err := resource.ParseQuantity(n.Memory)
	if err != nil {
		return fmt.Errorf("node %s: memory: %w", n.Name, err)
	}
	labels := map[string]string{"kubernetes.io/hostname": n.Name, "kubernetes.io/os": "linux"}
	for key, v := range n.Labels {
		labels[key] = v
	}
	if n.Product != "" {
		labels["nvidia.com/gpu.product"] = n.Product
	}
	alloc := corev1.ResourceList{
		corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem, corev1.ResourcePods: resource.MustParse("110"),
		corev1.ResourceEphemeralStorage: resource.MustParse("1Ti"),
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: labels}}
	if n.GPUs > 0 {
		alloc[GPUResource] = *resource.NewQuantity(int64(n.GPUs), resource.DecimalSI)
		if !n.NoTaint {
			node.Spec.Taints = []corev1.Taint{{Key: string(GPUResource), Value: "present", Effect: corev1.TaintEffectNoSchedule}}
		}
	}
	k.mu.Lock()
	k.nodes[n.Name] = true
	k.mu.Unlock()
	created, err := k.c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating node %s: %w", n.Name, err)
	}
	now := metav1.Now()
	created.Status = corev1.NodeStatus{
		Capacity: alloc, Allocatable: alloc,
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "the test kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now}},
		// No Hostname address: the API server would prefer it, and the fake names do not
		// resolve. It reaches this kubelet's /containerLogs at the InternalIP.
		Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: k.port}},
		NodeInfo:        corev1.NodeSystemInfo{KubeletVersion: "v1.37.2-gantry-test", OperatingSystem: "linux", Architecture: "amd64"},
	}
	if _, err := k.c.Client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("reporting node %s ready: %w", n.Name, err)
	}
	// The TaintNodesByCondition admission plugin gives every new node the not-ready taint; the
	// node lifecycle controller (not running here) lifts it once the node reports Ready.
	err = k.node(ctx, n.Name, func(node *corev1.Node) {
		node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady })
	})
	if err != nil {
		return fmt.Errorf("lifting node %s's not-ready taint: %w", n.Name, err)
	}
	return nil
}

// node applies change to a node's latest spec and writes it, retrying on conflicts.
func (k *Kubelet) node(ctx context.Context, name string, change func(*corev1.Node)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := k.c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(n)
		_, err = k.c.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// Cordon marks a node unschedulable (kubectl cordon).
func (k *Kubelet) Cordon(ctx context.Context, node string) error {
	return k.node(ctx, node, func(n *corev1.Node) { n.Spec.Unschedulable = true })
}

// OOMKill kills a pod's container as the kernel's OOM killer would: the container ends with
// status 137 and reason OOMKilled, and the pod fails.
func (k *Kubelet) OOMKill(ns, pod string) error { return k.kill(ns, pod, "OOMKilled") }

// Evict ends a pod as the kubelet does under node pressure: its container is killed and the
// pod fails with reason Evicted.
func (k *Kubelet) Evict(ns, pod string) error { return k.kill(ns, pod, "Evicted") }

func (k *Kubelet) kill(ns, pod, reason string) error {
	r := k.find(ns, pod)
	if r == nil {
		return fmt.Errorf("pod %s/%s: not running on the test kubelet", ns, pod)
	}
	r.end(reason)
	return nil
}

// LoseNode makes a node fail as a machine that died: its processes end at once, the node turns
// NotReady, and its pods are marked Failed with reason NodeLost and removed, as the node
// lifecycle and pod garbage collectors would after their timeouts.
func (k *Kubelet) LoseNode(ctx context.Context, node string) error {
	k.mu.Lock()
	k.lost[node] = time.Now()
	var runs []*run
	for _, r := range k.pods {
		if r.node == node {
			runs = append(runs, r)
		}
	}
	k.mu.Unlock()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := k.c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == corev1.NodeReady {
				n.Status.Conditions[i].Status, n.Status.Conditions[i].Reason = corev1.ConditionUnknown, "NodeStatusUnknown"
				n.Status.Conditions[i].Message = "Kubelet stopped posting node status."
				n.Status.Conditions[i].LastTransitionTime = metav1.Now()
			}
		}
		_, err = k.c.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("marking node %s lost: %w", node, err)
	}
	for _, r := range runs {
		r.end("NodeLost")
	}
	return nil
}

// Started returns when the test kubelet started a pod's process (zero until it has, and once
// the pod is gone).
func (k *Kubelet) Started(ns, pod string) time.Time {
	if r := k.find(ns, pod); r != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.started
	}
	return time.Time{}
}

// Ended returns when the test kubelet began reporting the end of the last container of that
// name that ended (zero if none has).
func (k *Kubelet) Ended(ns, pod string) time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.ended[ns+"/"+pod]
}

func (k *Kubelet) find(ns, pod string) *run {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, r := range k.pods {
		if r.ns == ns && r.name == pod {
			return r
		}
	}
	return nil
}

// sync acts on a pod's new state: a pod newly bound to one of its nodes is started; a pod
// being deleted is stopped.
func (k *Kubelet) sync(ctx context.Context, pod *corev1.Pod) {
	k.mu.Lock()
	if !k.nodes[pod.Spec.NodeName] {
		k.mu.Unlock()
		return
	}
	r := k.pods[pod.UID]
	if r == nil {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			k.mu.Unlock()
			return // finished before this kubelet saw it
		}
		r = &run{ns: pod.Namespace, name: pod.Name, node: pod.Spec.NodeName, uid: pod.UID,
			deleting: make(chan struct{}), gone: make(chan struct{}), killed: make(chan struct{}), more: make(chan struct{})}
		k.pods[pod.UID] = r
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			k.run(ctx, r, pod.DeepCopy())
		}()
	}
	k.mu.Unlock()
	if pod.DeletionTimestamp != nil {
		grace := time.Duration(0)
		if s := pod.DeletionGracePeriodSeconds; s != nil {
			grace = time.Duration(*s) * time.Second
		}
		r.delOnce.Do(func() {
			r.grace = grace
			close(r.deleting)
		})
	}
}

// removed notes that a pod left the API server.
func (k *Kubelet) removed(pod *corev1.Pod) {
	k.mu.Lock()
	r := k.pods[pod.UID]
	k.mu.Unlock()
	if r != nil {
		r.goneOnce.Do(func() { close(r.gone) })
	}
}

// run is a pod's life on the test kubelet.
func (k *Kubelet) run(ctx context.Context, r *run, pod *corev1.Pod) {
	defer func() {
		k.mu.Lock()
		delete(k.pods, r.uid)
		k.mu.Unlock()
	}()
	c := pod.Spec.Containers[0]
	argv, known := k.cfg.Images[c.Image]
	if k.cfg.NoProcess {
		known = true
	}
	if !known {
		msg := fmt.Sprintf("Failed to pull image %q: rpc error: code = NotFound desc = failed to pull and unpack image %q: not found", c.Image, c.Image)
		k.status(ctx, r, func(s *corev1.PodStatus) {
			s.Phase = corev1.PodPending
			s.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, Image: c.Image,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: msg}}}}
		})
		k.finish(ctx, r)
		return
	}
	if k.cfg.Pull > 0 {
		select {
		case <-time.After(k.cfg.Pull):
		case <-r.deleting:
			k.finish(ctx, r)
			return
		case <-ctx.Done():
			return
		}
	}
	mounts, ok := k.mountVolumes(ctx, r, pod) // volumes.go
	if !ok {
		return
	}
	if !k.cfg.NoProcess {
		if len(c.Command) > 0 {
			argv = c.Command
		}
		argv = append(slices.Clone(argv), c.Args...)
		env := append(slices.Clone(k.cfg.Env), "HOSTNAME="+pod.Name)
		for _, e := range c.Env {
			env = append(env, e.Name+"="+e.Value)
		}
		if mounts != "" {
			env = append(env, MountsEnv+"="+mounts)
		}
		p, err := adaptertest.StartProcess(argv, env, r.log)
		if err != nil {
			k.status(ctx, r, func(s *corev1.PodStatus) {
				s.Phase = corev1.PodFailed
				s.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, Image: c.Image,
					State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 128,
						Reason: "StartError", Message: err.Error()}}}}
			})
			k.finish(ctx, r)
			return
		}
		r.mu.Lock()
		r.proc, r.started = p, time.Now()
		r.mu.Unlock()
	} else {
		r.mu.Lock()
		r.started = time.Now()
		r.mu.Unlock()
	}
	startedAt := metav1.Now()
	k.status(ctx, r, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodRunning
		s.HostIP, s.PodIP = "127.0.0.1", "127.0.0.1"
		s.HostIPs, s.PodIPs = []corev1.HostIP{{IP: "127.0.0.1"}}, []corev1.PodIP{{IP: "127.0.0.1"}}
		s.StartTime = &startedAt
		setCondition(s, corev1.PodInitialized, corev1.ConditionTrue, "")
		setCondition(s, corev1.ContainersReady, corev1.ConditionTrue, "")
		setCondition(s, corev1.PodReady, corev1.ConditionTrue, "")
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, Image: c.Image, Ready: true, Started: new(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: startedAt}}}}
	})

	var exited <-chan struct{} // nil with NoProcess: runs until deleted or killed
	if r.proc != nil {
		exited = r.proc.Done()
	}
	select {
	case <-exited:
	case <-r.killed:
		if r.proc != nil {
			r.proc.Kill()
		}
	case <-r.deleting:
		if r.proc != nil {
			r.proc.Stop(r.grace)
		}
	case <-ctx.Done():
		if r.proc != nil {
			r.proc.Kill()
		}
		return
	}
	code := 0
	if r.proc != nil {
		code = r.proc.ExitCode()
	}
	r.mu.Lock()
	reason := r.reason
	if reason != "" && r.proc == nil {
		code = -1 // NoProcess: a fault kills the container
	}
	r.done = true
	close(r.more)
	r.more = make(chan struct{})
	r.mu.Unlock()
	k.mu.Lock()
	k.ended[r.ns+"/"+r.name] = time.Now()
	k.mu.Unlock()
	term := &corev1.ContainerStateTerminated{ExitCode: int32(code), StartedAt: startedAt, FinishedAt: metav1.Now(), Reason: "Completed"}
	if code < 0 { // killed by a signal: the runtime reports 128+9
		term.ExitCode = 137
	}
	if term.ExitCode != 0 {
		term.Reason = "Error"
	}
	k.status(ctx, r, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodSucceeded
		if term.ExitCode != 0 {
			s.Phase = corev1.PodFailed
		}
		switch reason {
		case "OOMKilled":
			term.Reason, term.ExitCode = "OOMKilled", 137
		case "Evicted":
			s.Phase, s.Reason, s.Message = corev1.PodFailed, "Evicted", "The node was low on resource: memory."
		case "NodeLost":
			s.Phase, s.Reason = corev1.PodFailed, "NodeLost"
			s.Message = fmt.Sprintf("Node %s which was running pod %s is unresponsive", r.node, r.name)
		}
		setCondition(s, corev1.PodReady, corev1.ConditionFalse, "PodCompleted")
		setCondition(s, corev1.ContainersReady, corev1.ConditionFalse, "PodCompleted")
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, Image: c.Image,
			State: corev1.ContainerState{Terminated: term}}}
	})
	if reason == "NodeLost" { // the pod garbage collector removes pods of a lost node
		k.remove(ctx, r)
	}
	k.finish(ctx, r)
}

// finish waits until the pod is being deleted, then removes it (a kubelet's last word on a
// pod is its delete with grace 0), and waits until it is gone.
func (k *Kubelet) finish(ctx context.Context, r *run) {
	select {
	case <-r.deleting:
		k.remove(ctx, r)
	case <-r.gone:
	case <-ctx.Done():
		return
	}
	select {
	case <-r.gone:
	case <-ctx.Done():
	}
}

// remove deletes the pod with grace 0, if it is still the same pod.
func (k *Kubelet) remove(ctx context.Context, r *run) {
	zero := int64(0)
	err := k.c.Client.CoreV1().Pods(r.ns).Delete(ctx, r.name, metav1.DeleteOptions{GracePeriodSeconds: &zero,
		Preconditions: &metav1.Preconditions{UID: &r.uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "test kubelet: removing pod %s/%s: %v\n", r.ns, r.name, err)
	}
}

// status applies change to the pod's latest status and writes it, retrying on conflicts.
func (k *Kubelet) status(ctx context.Context, r *run, change func(*corev1.PodStatus)) {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, err := k.c.Client.CoreV1().Pods(r.ns).Get(ctx, r.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pod.UID != r.uid {
			return apierrors.NewNotFound(corev1.Resource("pods"), r.name)
		}
		change(&pod.Status)
		_, err = k.c.Client.CoreV1().Pods(r.ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "test kubelet: status of pod %s/%s: %v\n", r.ns, r.name, err)
	}
}

func setCondition(s *corev1.PodStatus, t corev1.PodConditionType, v corev1.ConditionStatus, reason string) {
	now := metav1.Now()
	for i := range s.Conditions {
		if s.Conditions[i].Type == t {
			if s.Conditions[i].Status != v {
				s.Conditions[i].LastTransitionTime = now
			}
			s.Conditions[i].Status, s.Conditions[i].Reason = v, reason
			return
		}
	}
	s.Conditions = append(s.Conditions, corev1.PodCondition{Type: t, Status: v, Reason: reason, LastTransitionTime: now})
}

// end ends the container as a fault does, giving its end the reason.
func (r *run) end(reason string) {
	r.killOnce.Do(func() {
		r.mu.Lock()
		r.reason = reason
		r.mu.Unlock()
		close(r.killed)
	})
}

// log keeps a line of the container's output.
func (r *run) log(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lines) == maxLines {
		r.lines = append(r.lines[:0], r.lines[maxLines/10:]...)
		r.dropped += maxLines / 10
	}
	r.lines = append(r.lines, line)
	close(r.more)
	r.more = make(chan struct{})
}

// serveLogs answers the API server's GET /containerLogs/{namespace}/{pod}/{container}, with
// tailLines and follow.
func (k *Kubelet) serveLogs(w http.ResponseWriter, req *http.Request) {
	parts := strings.Split(strings.TrimPrefix(req.URL.Path, "/containerLogs/"), "/")
	if len(parts) != 3 {
		http.NotFound(w, req)
		return
	}
	r := k.find(parts[0], parts[1])
	if r == nil {
		http.Error(w, fmt.Sprintf("pod %s/%s is not running here", parts[0], parts[1]), http.StatusNotFound)
		return
	}
	tail := -1
	if s := req.URL.Query().Get("tailLines"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			http.Error(w, "bad tailLines", http.StatusBadRequest)
			return
		}
		tail = n
	}
	follow := req.URL.Query().Get("follow") == "true"
	w.Header().Set("Content-Type", "text/plain")
	bw := bufio.NewWriter(w)
	r.mu.Lock()
	next := r.dropped // the number of the next line to write, counting trimmed ones
	if tail >= 0 {
		next += max(len(r.lines)-tail, 0)
	}
	for {
		for _, l := range r.lines[max(next-r.dropped, 0):] {
			_, _ = bw.WriteString(l + "\n")
		}
		next = r.dropped + len(r.lines)
		more, ended := r.more, r.done
		r.mu.Unlock()
		if err := bw.Flush(); err != nil {
			return
		}
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		if !follow || ended {
			return
		}
		select {
		case <-more:
		case <-req.Context().Done():
			return
		}
		r.mu.Lock()
	}
}
