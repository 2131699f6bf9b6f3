package kubernetes

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// These are fast unit cases on client-go's fake clientset (an object tracker that ignores
// field selectors): spec rendering and status mapping. The proof that the pool works against
// a real API server and scheduler is the kubecluster module's adaptertest run.

func gpuNode(name, product string, gpus int64) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{GPUProductLabel: product}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
}

type events struct {
	mu  sync.Mutex
	evs []pool.WorkerEvent
	ch  chan pool.WorkerEvent
}

func (e *events) report(ev pool.WorkerEvent) {
	e.mu.Lock()
	e.evs = append(e.evs, ev)
	e.mu.Unlock()
	e.ch <- ev
}

func (e *events) next(t *testing.T) pool.WorkerEvent {
	t.Helper()
	select {
	case ev := <-e.ch:
		return ev
	case <-time.After(30 * time.Second):
		t.Fatal("no worker event within 30s")
		return pool.WorkerEvent{}
	}
}

func setup(t *testing.T, objs ...runtime.Object) (*Pool, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset(objs...)
	p, err := New(t.Context(), Config{Pool: core.PoolInfo{ID: "k8s", GPUType: "NVIDIA H100 80GB HBM3", GPUs: 1, PerWorker: 8},
		Client: client, Namespace: "gpu", Labels: map[string]string{"team": "ml"},
		Credentials: func(_ context.Context, id string) (Credential, error) {
			return Credential{Username: "u", Password: "p", Server: "ghcr.io"}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p, client
}

func TestCapacityFromMatchingNodesMinusOthersRequests(t *testing.T) {
	t.Parallel()
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "x"},
		Spec: corev1.PodSpec{NodeName: "a", Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{GPUResource: *resource.NewQuantity(3, resource.DecimalSI)}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	p, _ := setup(t, gpuNode("a", "NVIDIA-H100-80GB-HBM3", 8), gpuNode("b", "NVIDIA-H100-80GB-HBM3", 4),
		gpuNode("c", "NVIDIA-L4", 8), other)
	if got := p.Capacity(); got != 9 {
		t.Errorf("Capacity() = %d; want 8+4 on the H100 nodes minus 3 another pod requests = 9", got)
	}
}

func TestStartRendersThePodAndMapsItsStatus(t *testing.T) {
	t.Parallel()
	p, client := setup(t, gpuNode("a", "NVIDIA-H100-80GB-HBM3", 8))
	ev := &events{ch: make(chan pool.WorkerEvent, 8)}
	spec := pool.WorkerSpec{ID: "ep-w1", Endpoint: "ep", Image: "ghcr.io/acme/w:1", Args: "python handler.py",
		GPUCount: 2, Disk: 20, Registry: "acme", Env: map[string]string{"RUNPOD_AI_API_KEY": "gw_token"},
		PortEnv: map[string]int{"PORT": 8000, "PORT_HEALTH": 8000}, Report: ev.report}
	if err := p.Start(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	pod, err := client.CoreV1().Pods("gpu").Get(t.Context(), "gantry-ep-w1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	gpu := c.Resources.Limits[GPUResource]
	eph := c.Resources.Requests[corev1.ResourceEphemeralStorage]
	for _, check := range []struct {
		what string
		ok   bool
	}{
		{"restartPolicy Never", pod.Spec.RestartPolicy == corev1.RestartPolicyNever},
		{"labels", pod.Labels[LabelWorker] == "ep-w1" && pod.Labels[LabelEndpoint] == "ep" && pod.Labels[LabelPool] == "k8s" && pod.Labels["team"] == "ml"},
		{"nvidia.com/gpu limit 2", gpu.Value() == 2},
		{"ephemeral-storage 20G", eph.Value() == 20e9},
		{"GPU product selector", pod.Spec.NodeSelector[GPUProductLabel] == "NVIDIA-H100-80GB-HBM3"},
		{"nvidia.com/gpu toleration", len(pod.Spec.Tolerations) == 1 && pod.Spec.Tolerations[0].Key == "nvidia.com/gpu"},
		{"no service account token", pod.Spec.AutomountServiceAccountToken != nil && !*pod.Spec.AutomountServiceAccountToken},
		{"pull secret", len(pod.Spec.ImagePullSecrets) == 1 && pod.Spec.ImagePullSecrets[0].Name == "gantry-registry-acme"},
		{"/dev/shm", len(c.VolumeMounts) == 1 && c.VolumeMounts[0].MountPath == "/dev/shm"},
		{"args", strings.Join(c.Args, " ") == "python handler.py"},
		{"token env", hasEnv(c.Env, "RUNPOD_AI_API_KEY", "gw_token")},
		{"PORT env", hasEnv(c.Env, "PORT", "8000")},
	} {
		if !check.ok {
			t.Errorf("pod %s: want %s; got %+v", pod.Name, check.what, pod.Spec)
		}
	}
	if _, err := client.CoreV1().Secrets("gpu").Get(t.Context(), "gantry-registry-acme", metav1.GetOptions{}); err != nil {
		t.Errorf("the pull secret: %v", err)
	}

	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if _, err := client.CoreV1().Pods("gpu").UpdateStatus(t.Context(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if e := ev.next(t); e.State != pool.WorkerRunning || e.Addrs[8000] != "10.0.0.7:8000" {
		t.Errorf("event = %+v; want WorkerRunning at 10.0.0.7:8000", e)
	}
	if ws, _ := p.LiveWorkers(t.Context()); len(ws) != 1 || !ws[0].Known || ws[0].Endpoint != "ep" {
		t.Errorf("Workers() = %+v; want the one known worker of ep", ws)
	}
	pod.Status.Phase = corev1.PodFailed
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker", State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}}}}
	if _, err := client.CoreV1().Pods("gpu").UpdateStatus(t.Context(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e := ev.next(t)
	var exit *ExitError
	if e.State != pool.WorkerExited || !errors.As(e.Err, &exit) || exit.Reason != "OOMKilled" || exit.ExitCode != 137 {
		t.Errorf("event = %+v; want WorkerExited with OOMKilled, status 137", e)
	}
}

func hasEnv(env []corev1.EnvVar, k, v string) bool {
	for _, e := range env {
		if e.Name == k && e.Value == v {
			return true
		}
	}
	return false
}

func TestState(t *testing.T) {
	t.Parallel()
	now := time.Now()
	old := metav1.NewTime(now.Add(-time.Minute))
	waiting := func(reason string) corev1.PodStatus {
		return corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "m"}}}}}
	}
	unsched := corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled,
		Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."}}}
	for _, tc := range []struct {
		name    string
		status  corev1.PodStatus
		created metav1.Time
		want    string // "running", "waiting", "pending", "exited", or the exit reason
	}{
		{"image pull", waiting("ImagePullBackOff"), old, "ImagePullBackOff"},
		{"err image pull", waiting("ErrImagePull"), old, "ErrImagePull"},
		{"crash loop", waiting("CrashLoopBackOff"), old, "CrashLoopBackOff"},
		{"evicted", corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: "low on memory"}, old, "Evicted"},
		{"succeeded", corev1.PodStatus{Phase: corev1.PodSucceeded}, old, "exited"},
		{"unschedulable, past the bound", unsched, old, "waiting"},
		{"unschedulable, within the bound", unsched, metav1.NewTime(now), "pending"},
		{"running, not ready", corev1.PodStatus{Phase: corev1.PodRunning}, old, "pending"},
	} {
		st := State(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: tc.created}, Status: tc.status}, now, 30*time.Second)
		got := "pending"
		var exit *ExitError
		switch {
		case st.Gone && errors.As(st.Err, &exit):
			got = exit.Reason
		case st.Gone:
			got = "exited"
		case st.Running:
			got = "running"
		case st.Waiting != "":
			got = "waiting"
		}
		if got != tc.want {
			t.Errorf("State(%s) = %+v (%s); want %s", tc.name, st, got, tc.want)
		}
	}
}

// TestCapacityCountReadsOnlyItsNamespace: with capacity "count" the pool starts on an account
// that may not read nodes or other namespaces (a Role in its namespace), its capacity is its
// count, and it lists and watches only its own namespace's pods.
func TestCapacityCountReadsOnlyItsNamespace(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset(gpuNode("a", "NVIDIA-H100-80GB-HBM3", 8))
	var mu sync.Mutex
	var outside []string
	client.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() == "gpu" {
			return false, nil, nil
		}
		mu.Lock()
		outside = append(outside, a.GetVerb()+" "+a.GetResource().Resource+" in "+cmpNS(a.GetNamespace()))
		mu.Unlock()
		return true, nil, apierrors.NewForbidden(a.GetResource().GroupResource(), "", errors.New("outside the pool's namespace"))
	})
	client.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		if a.GetNamespace() == "gpu" {
			return false, nil, nil
		}
		mu.Lock()
		outside = append(outside, "watch "+a.GetResource().Resource+" in "+cmpNS(a.GetNamespace()))
		mu.Unlock()
		return true, nil, apierrors.NewForbidden(a.GetResource().GroupResource(), "", errors.New("outside the pool's namespace"))
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	p, err := New(ctx, Config{Pool: core.PoolInfo{ID: "k8s", GPUType: "NVIDIA H100 80GB HBM3", GPUs: 3}, Client: client,
		Namespace: "gpu", Capacity: CapacityCount})
	if err != nil {
		t.Fatalf("New with capacity count on a namespace-only account: %v", err)
	}
	defer p.Close()
	if got := p.Capacity(); got != 3 {
		t.Errorf("Capacity() = %d; want the pool's count, 3 (the node's 8 GPUs are not read)", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(outside) > 0 {
		t.Errorf("the pool asked outside its namespace: %v", outside)
	}
}

func TestCapacityModeIsChecked(t *testing.T) {
	t.Parallel()
	_, err := New(t.Context(), Config{Pool: core.PoolInfo{ID: "k8s", GPUType: "NVIDIA H100 80GB HBM3", GPUs: 3},
		Client: fake.NewClientset(), Capacity: "nodez"})
	if err == nil || !strings.Contains(err.Error(), `capacity "nodez": want nodes`) {
		t.Errorf("New with capacity nodez = %v; want the mode refused", err)
	}
}

func cmpNS(ns string) string {
	if ns == "" {
		return "the cluster"
	}
	return ns
}
