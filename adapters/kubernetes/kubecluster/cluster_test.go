package kubecluster_test

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantryhq/gantry/adapters/adaptertest"
	kube "github.com/gantryhq/gantry/adapters/kubernetes"
	"github.com/gantryhq/gantry/adapters/kubernetes/kubecluster"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/internal/testworker"
	"github.com/gantryhq/gantry/pool"
)

// wait is how long a test waits for an event: pods go through a real API server, scheduler
// and process start on a small, busy machine.
const wait = 60 * time.Second

// TestKubernetes runs the Kubernetes pool against a real kube-apiserver and kube-scheduler
// (one per test binary: they mutate process globals), with the test kubelet running each
// pod as a process of this binary. Each subtest has its own nodes (a group label) and pools.
func TestKubernetes(t *testing.T) {
	c := kubecluster.Start(t)
	k := kubelet(t, c)
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, *kubecluster.Cluster, *kubecluster.Kubelet)
	}{
		{"Contract", testContract},
		{"Capacity", testCapacity},
		{"Faults", testFaults},
		{"NodeLost", testNodeLost},
		{"Unschedulable", testUnschedulable},
		{"Found", testFound},
		{"Spec", testSpec},
		{"Jobs", testJobs},
		{"Volumes", testVolumes},
		{"Chart", testChart},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, c, k)
		})
	}
}

// testContract runs the adapter kit: pods through the real scheduler onto fake nodes, each a
// process; a crash is a pod that Failed with the container's status, and an unstartable
// spec names a registry the pool has no credentials for.
func testContract(t *testing.T, c *kubecluster.Cluster, k *kubecluster.Kubelet) {
	addNodes(t, k, "contract", 8, 8)
	adaptertest.Run(t, adaptertest.Harness{
		New: func(t *testing.T) pool.Pool { return newPool(t, c, "contract", nil) },
		Spec: func(t *testing.T, b adaptertest.Behaviour) pool.WorkerSpec {
			spec := pool.WorkerSpec{Image: testImage, Endpoint: "ep", Env: map[string]string{"KIT": "1"}, Args: testworker.Args(b)}
			if b == adaptertest.Unstartable {
				spec.Registry = "no-such-credential"
			}
			return spec
		},
		Probe:     func(t *testing.T, spec pool.WorkerSpec) (map[string]string, bool) { return podEnv(c, spec.ID) },
		StopGrace: testGrace,
		Timeout:   wait,
		Workers:   8,
	})
}

// testCapacity: the pool's capacity is the allocatable GPUs of its nodes minus what other
// pods request there, following nodes that join and are cordoned.
func testCapacity(t *testing.T, c *kubecluster.Cluster, k *kubecluster.Kubelet) {
	addNodes(t, k, "capacity", 1, 4)
	p := newPool(t, c, "capacity", nil)
	want := func(n int, why string) {
		t.Helper()
		testkit.EventuallyWithin(t, wait, why, func() bool { return p.Capacity() == n })
	}
	want(4, "capacity of one node of 4 GPUs")
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "someone-else", Namespace: namespace},
		Spec: corev1.PodSpec{NodeSelector: map[string]string{groupLabel: "capacity"}, RestartPolicy: corev1.RestartPolicyNever,
			Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "c", Image: testImage, Args: []string{"serves"},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}}}}
	if _, err := c.Client.CoreV1().Pods(namespace).Create(context.Background(), other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want(3, "capacity once another tenant's pod holds a GPU")
	addNodes(t, k, "capacity2", 1, 4) // another group: not the pool's
	if err := k.AddNode(context.Background(), kubecluster.Node{Name: "capacity-extra", GPUs: 4, Product: "NVIDIA-H100-80GB-HBM3",
		Labels: map[string]string{groupLabel: "capacity"}}); err != nil {
		t.Fatal(err)
	}
	want(7, "capacity once a second node joined")
	if err := k.Cordon(context.Background(), "capacity-extra"); err != nil {
		t.Fatal(err)
	}
	want(3, "capacity once the second node is cordoned")
	zero := int64(0)
	if err := c.Client.CoreV1().Pods(namespace).Delete(context.Background(), "someone-else", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	want(4, "capacity once the other tenant's pod is gone")
}

// testFaults: each way a pod ends reaches the worker's WorkerExited with the cluster's reason.
func testFaults(t *testing.T, c *kubecluster.Cluster, k *kubecluster.Kubelet) {
	addNodes(t, k, "faults", 2, 4)
	p := newPool(t, c, "faults", nil)
	rec := &adaptertest.Recorder{}
	start := func(id, image, args string) {
		t.Helper()
		if err := p.Start(context.Background(), pool.WorkerSpec{ID: id, Endpoint: "ep", Image: image, Args: args, GPUCount: 1, Report: rec.Report}); err != nil {
			t.Fatalf("Start(%s) = %v", id, err)
		}
	}
	exit := func(id string, want ...string) {
		t.Helper()
		e := rec.Wait(t, id, pool.WorkerExited, wait)
		if e.Err == nil || e.Stopped {
			t.Fatalf("%s exited with %v (stopped %v); want an error naming %q", id, e.Err, e.Stopped, want)
		}
		for _, w := range want {
			if !strings.Contains(e.Err.Error(), w) {
				t.Errorf("%s exited with %q; want it to name %q", id, e.Err, w)
			}
		}
	}
	running := func(id string) {
		t.Helper()
		rec.Wait(t, id, pool.WorkerRunning, wait)
	}

	start("pull", "registry.example/no-such-image:1", "")
	start("oom", testImage, "serves")
	start("evicted", testImage, "serves")
	start("deleted", testImage, "serves")
	start("crash", testImage, "crashes")
	exit("pull", "ErrImagePull", "no-such-image")
	if n := len(rec.Events("pull")); n != 1 {
		t.Errorf("the pod that could not pull its image sent %d events; want only its exit", n)
	}
	exit("crash", "exit status 37")

	running("oom")
	if err := k.OOMKill(namespace, kube.PodName("oom")); err != nil {
		t.Fatal(err)
	}
	exit("oom", "OOMKilled", "exit status 137")

	running("evicted")
	if err := k.Evict(namespace, kube.PodName("evicted")); err != nil {
		t.Fatal(err)
	}
	exit("evicted", "Evicted", "low on resource")

	running("deleted")
	if err := c.Client.CoreV1().Pods(namespace).Delete(context.Background(), kube.PodName("deleted"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	exit("deleted", "deleted by someone other than Gantry")

	// Logs come from pods/log, through the API server and the kubelet.
	start("logs", testImage, "serves")
	running("logs")
	testkit.EventuallyWithin(t, wait, "the worker's env line in its logs", func() bool {
		rc, err := p.Logs(context.Background(), "logs", 5)
		if err != nil {
			return false
		}
		defer rc.Close()
		b, _ := io.ReadAll(rc)
		return strings.Contains(string(b), "GANTRY_TEST_ENV ")
	})
	if err := p.Stop(context.Background(), "logs"); err != nil {
		t.Fatal(err)
	}
	if e := rec.Wait(t, "logs", pool.WorkerExited, wait); e.Err != nil || !e.Stopped {
		t.Errorf("a stopped worker exited with %v, stopped %v; want no error, stopped", e.Err, e.Stopped)
	}
	if _, err := p.Logs(context.Background(), "nobody", 5); err == nil {
		t.Error("Logs of an unknown worker = nil error; want its pod gone")
	}
}

// testNodeLost: the workers of a node that dies exit with NodeLost.
func testNodeLost(t *testing.T, c *kubecluster.Cluster, k *kubecluster.Kubelet) {
	addNodes(t, k, "lost", 1, 2)
	p := newPool(t, c, "lost", nil)
	rec := &adaptertest.Recorder{}
	for _, id := range []string{"lost1", "lost2"} {
		if err := p.Start(context.Background(), pool.WorkerSpec{ID: id, Endpoint: "ep", Image: testImage, Args: "serves", GPUCount: 1, Report: rec.Report}); err != nil {
			t.Fatal(err)
		}
		rec.Wait(t, id, pool.WorkerRunning, wait)
	}
	if err := k.LoseNode(context.Background(), "lost-0"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"lost1", "lost2"} {
		e := rec.Wait(t, id, pool.WorkerExited, wait)
		if e.Err == nil || !strings.Contains(e.Err.Error(), "NodeLost") {
			t.Errorf("%s on a lost node exited with %v; want NodeLost", id, e.Err)
		}
	}
	testkit.EventuallyWithin(t, wait, "no capacity on a lost node", func() bool { return p.Capacity() == 0 })
}

// testUnschedulable: a pod no node can take stays Pending; past the bound its worker is
// waiting (throttled) with the scheduler's message, not crashed, and it starts once a node
// that fits joins, as with a cluster autoscaler.
func testUnschedulable(t *testing.T, c *kubecluster.Cluster, k *kubecluster.Kubelet) {
	addNodes(t, k, "full", 1, 1)
	p := newPool(t, c, "full", nil)
	rec := &adaptertest.Recorder{}
	if err := p.Start(context.Background(), pool.WorkerSpec{ID: "big", Endpoint: "ep", Image: testImage, Args: "serves", GPUCount: 2, Report: rec.Report}); err != nil {
		t.Fatal(err)
	}
	e := rec.Wait(t, "big", pool.WorkerWaiting, wait)
	if e.Err == nil || !strings.Contains(e.Err.Error(), "Insufficient nvidia.com/gpu") {
		t.Errorf("a pod too big for the nodes is waiting with %v; want the scheduler's Insufficient nvidia.com/gpu", e.Err)
	}
	if err := k.AddNode(context.Background(), kubecluster.Node{Name: "full-big", GPUs: 2, Product: "NVIDIA-H100-80GB-HBM3",
		Labels: map[string]string{groupLabel: "full"}}); err != nil {
		t.Fatal(err)
	}
	rec.Wait(t, "big", pool.WorkerRunning, wait)
	if err := p.Stop(context.Background(), "big"); err != nil {
		t.Fatal(err)
	}
	if e := rec.Wait(t, "big", pool.WorkerExited, wait); e.Err != nil {
		t.Errorf("stopped worker exited with %v", e.Err)
	}
	if evs := rec.Events("big"); len(evs) != 3 {
		t.Errorf("events %s; want waiting, running, exited", adaptertest.FormatEvents(evs))
	}
}

// testFound: a pool made after another of the same installation and id (a restart, or a new
// leader) lists the pods it finds as workers it did not start, with their revision and GPUs;
// it can adopt one (its events flow again) and stop another.
func testFound(t *testing.T, c *kubecluster.Cluster, k *kubecluster.Kubelet) {
	addNodes(t, k, "found", 1, 4)
	first := newPool(t, c, "found", nil)
	rec := &adaptertest.Recorder{}
	for _, id := range []string{"old1", "old2"} {
		if err := first.Start(context.Background(), pool.WorkerSpec{ID: id, Endpoint: "ep", Image: testImage, Args: "serves",
			GPUCount: 2, Revision: "rev-" + id, Report: rec.Report}); err != nil {
			t.Fatal(err)
		}
		rec.Wait(t, id, pool.WorkerRunning, wait)
	}
	first.Close() // Gantry went away; its pods did not
	id := first.Describe().ID
	second := newPool(t, c, "found", func(cfg *kube.Config) { cfg.Pool.ID = id })
	ws, err := second.LiveWorkers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(ws, func(a, b pool.LiveWorker) int { return strings.Compare(a.ID, b.ID) })
	if len(ws) != 2 || ws[0].Known || ws[1].Known || ws[0].Endpoint != "ep" || ws[0].Revision != "rev-old1" || ws[0].Count != 2 {
		t.Fatalf("Workers() = %+v; want old1 and old2, not known, of endpoint ep, with their revision and 2 GPUs", ws)
	}
	again := &adaptertest.Recorder{}
	if err := second.Adopt(context.Background(), ws[0], again.Report); err != nil {
		t.Fatalf("Adopt(old1) = %v", err)
	}
	again.Wait(t, "old1", pool.WorkerRunning, wait)
	if err := second.Adopt(context.Background(), ws[0], again.Report); err == nil {
		t.Error("a second Adopt of the same worker = nil; want an error")
	}
	if err := second.Stop(context.Background(), "old2"); err != nil { // reaped
		t.Fatal(err)
	}
	testkit.EventuallyWithin(t, wait, "Workers() listing only old1, known, after adopting it and stopping old2", func() bool {
		ws, _ := second.LiveWorkers(context.Background())
		return len(ws) == 1 && ws[0].Known && ws[0].ID == "old1"
	})
	if err := k.OOMKill(namespace, kube.PodName("old1")); err != nil {
		t.Fatal(err)
	}
	if e := again.Wait(t, "old1", pool.WorkerExited, wait); e.Err == nil || !strings.Contains(e.Err.Error(), "OOMKilled") {
		t.Errorf("the adopted worker exited with %v; want OOMKilled", e.Err)
	}
	testkit.EventuallyWithin(t, wait, "the found pods gone", func() bool {
		pods, err := c.Client.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: kube.LabelPool + "=" + id})
		return err == nil && len(pods.Items) == 0
	})
}

// testSpec: the pod as the API server stored it carries what the issue asks (the real API
// server validates it, which the fake clientset does not).
func testSpec(t *testing.T, c *kubecluster.Cluster, k *kubecluster.Kubelet) {
	addNodes(t, k, "spec", 1, 2)
	p := newPool(t, c, "spec", func(cfg *kube.Config) {
		cfg.WorkerURL = "http://gantry.gantry.svc:8080"
		cfg.Labels = map[string]string{"team": "ml"}
		cfg.Credentials = func(context.Context, string) (kube.Credential, error) {
			return kube.Credential{Username: "u", Password: "p", Server: "ghcr.io"}, nil
		}
	})
	rec := &adaptertest.Recorder{}
	if err := p.Start(context.Background(), pool.WorkerSpec{ID: "spec1", Endpoint: "ep", Image: testImage, Args: "serves", GPUCount: 2,
		Disk: 20, Registry: "ghcr", Report: rec.Report,
		Env: map[string]string{"RUNPOD_WEBHOOK_GET_JOB": "http://127.0.0.1:1/v2/ep/job-take/spec1?gpu=x", "MODEL": "m"}}); err != nil {
		t.Fatal(err)
	}
	rec.Wait(t, "spec1", pool.WorkerRunning, wait)
	pod, err := c.Client.CoreV1().Pods(namespace).Get(context.Background(), kube.PodName("spec1"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctr := pod.Spec.Containers[0]
	gpu := ctr.Resources.Limits["nvidia.com/gpu"]
	disk := ctr.Resources.Requests[corev1.ResourceEphemeralStorage]
	env := map[string]string{}
	for _, e := range ctr.Env {
		env[e.Name] = e.Value
	}
	switch {
	case pod.Spec.RestartPolicy != corev1.RestartPolicyNever:
		t.Errorf("restartPolicy %s; want Never", pod.Spec.RestartPolicy)
	case gpu.Value() != 2 || disk.Value() != 20e9:
		t.Errorf("resources %+v; want 2 GPUs and 20 GB of ephemeral storage", ctr.Resources)
	case pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken:
		t.Error("the pod mounts a service account token; want none")
	case len(pod.Spec.ImagePullSecrets) != 1:
		t.Errorf("imagePullSecrets %v; want the registry's", pod.Spec.ImagePullSecrets)
	case pod.Labels["team"] != "ml" || pod.Labels[kube.LabelWorker] != "spec1" || pod.Labels[kube.LabelEndpoint] != "ep":
		t.Errorf("labels %v", pod.Labels)
	case env["RUNPOD_WEBHOOK_GET_JOB"] != "http://gantry.gantry.svc:8080/v2/ep/job-take/spec1?gpu=x" || env["MODEL"] != "m":
		t.Errorf("env %v; want the worker URL rebased onto workerUrl", env)
	case pod.Spec.NodeName != "spec-0":
		t.Errorf("bound to %q; want spec-0", pod.Spec.NodeName)
	}
	secret, err := c.Client.CoreV1().Secrets(namespace).Get(context.Background(), pod.Spec.ImagePullSecrets[0].Name, metav1.GetOptions{})
	if err != nil || secret.Type != corev1.SecretTypeDockerConfigJson || !strings.Contains(string(secret.Data[corev1.DockerConfigJsonKey]), "ghcr.io") {
		t.Errorf("pull secret %v, %v; want a dockerconfigjson for ghcr.io", secret, err)
	}
	if err := p.Stop(context.Background(), "spec1"); err != nil {
		t.Fatal(err)
	}
	rec.Wait(t, "spec1", pool.WorkerExited, wait)
}
