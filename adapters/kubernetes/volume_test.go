package kubernetes

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// volumePool is a pool with the given volume config on the fake clientset.
func volumePool(t *testing.T, vc VolumeConfig) (*Pool, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset()
	p, err := New(t.Context(), Config{Pool: core.PoolInfo{ID: "k8s", GPUType: "NVIDIA H100 80GB HBM3", GPUs: 1, PerWorker: 8},
		Client: client, Namespace: "gpu", Installation: "prod", Capacity: CapacityCount, Volumes: vc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p, client
}

func claimSize(t *testing.T, c *corev1.PersistentVolumeClaim) string {
	t.Helper()
	q := c.Spec.Resources.Requests[corev1.ResourceStorage]
	return q.String()
}

// TestEnsureVolumeCreatesGrowsAndDeletesTheClaim: one claim per volume, labelled with the
// installation, of the configured class and mode and the volume's size in Gi; a bigger size
// patches its request, a smaller one changes nothing; another installation's claim is left
// alone; DeleteVolume deletes it, and a second delete is no error.
func TestEnsureVolumeCreatesGrowsAndDeletesTheClaim(t *testing.T) {
	t.Parallel()
	p, client := volumePool(t, VolumeConfig{StorageClass: "fast-nfs"})
	ctx := t.Context()
	v := core.Volume{ID: "vol1", SizeGB: 20, DataCenter: "k8s"}
	if err := p.EnsureVolume(ctx, v); err != nil {
		t.Fatal(err)
	}
	api := client.CoreV1().PersistentVolumeClaims("gpu")
	c, err := api.Get(ctx, "gantry-vol-vol1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Spec.StorageClassName == nil || *c.Spec.StorageClassName != "fast-nfs" || len(c.Spec.AccessModes) != 1 ||
		c.Spec.AccessModes[0] != corev1.ReadWriteMany || claimSize(t, c) != "20Gi" || c.Labels[LabelInstallation] != "prod" ||
		c.Labels[LabelVolume] != "vol1" {
		t.Fatalf("claim %+v; want class fast-nfs, ReadWriteMany, 20Gi, labelled prod and vol1", c)
	}
	v.SizeGB = 50
	if err := p.EnsureVolume(ctx, v); err != nil {
		t.Fatal(err)
	}
	if c, _ = api.Get(ctx, "gantry-vol-vol1", metav1.GetOptions{}); claimSize(t, c) != "50Gi" {
		t.Errorf("claim request after a resize = %s; want 50Gi", claimSize(t, c))
	}
	v.SizeGB = 30
	if err := p.EnsureVolume(ctx, v); err != nil {
		t.Fatal(err)
	}
	if c, _ = api.Get(ctx, "gantry-vol-vol1", metav1.GetOptions{}); claimSize(t, c) != "50Gi" {
		t.Errorf("claim request after a smaller size = %s; want 50Gi still (never shrinks)", claimSize(t, c))
	}
	if n, err := p.VolumeUsage(ctx, v); n != -1 || err != nil {
		t.Errorf("VolumeUsage = %d, %v; want -1", n, err)
	}

	other := p.claim(core.Volume{ID: "theirs", SizeGB: 10})
	other.Labels[LabelInstallation] = "staging"
	if _, err := api.Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	theirs := core.Volume{ID: "theirs", SizeGB: 10}
	if err := p.EnsureVolume(ctx, theirs); err == nil || !strings.Contains(err.Error(), "not this installation's") {
		t.Errorf("EnsureVolume over another installation's claim = %v; want refused", err)
	}
	if err := p.DeleteVolume(ctx, theirs); err == nil {
		t.Error("DeleteVolume of another installation's claim = nil; want refused")
	}

	if err := p.DeleteVolume(ctx, v); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Get(ctx, "gantry-vol-vol1", metav1.GetOptions{}); err == nil {
		t.Error("the claim is still there after DeleteVolume")
	}
	if err := p.DeleteVolume(ctx, v); err != nil {
		t.Errorf("DeleteVolume of a deleted volume = %v; want nil", err)
	}
}

func TestVolumeConfigIsChecked(t *testing.T) {
	t.Parallel()
	for _, vc := range []VolumeConfig{{AccessMode: "ReadOnlyMany"}, {StorageClass: "Not_A_Name"}} {
		_, err := New(context.Background(), Config{Pool: core.PoolInfo{ID: "k8s", GPUType: "NVIDIA H100 80GB HBM3", GPUs: 1},
			Client: fake.NewClientset(), Capacity: CapacityCount, Volumes: vc})
		if err == nil || !strings.Contains(err.Error(), "volumes.") {
			t.Errorf("New with volumes %+v = %v; want an error naming volumes.<field>", vc, err)
		}
	}
}

func TestClaimName(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]string{"vol1": "gantry-vol-vol1", "abc123xyz": "gantry-vol-abc123xyz"} {
		if got := ClaimName(id); got != want {
			t.Errorf("ClaimName(%q) = %q; want %q", id, got, want)
		}
	}
	a, b := ClaimName("Weights_V1"), ClaimName("weights-v1")
	if a == b || len(validation.IsDNS1123Label(a)) > 0 || !strings.HasPrefix(a, "gantry-vol-weights-v1-") {
		t.Errorf("ClaimName(Weights_V1) = %q (weights-v1: %q); want a distinct DNS label", a, b)
	}
	if long := ClaimName(strings.Repeat("x", 80)); len(validation.IsDNS1123Label(long)) > 0 {
		t.Errorf("ClaimName of a long id = %q; want a DNS label", long)
	}
}

// TestPodMountsTheClaim: a spec with a volume renders a pod that mounts the volume's claim
// read-write at /runpod-volume; one that waits past the mount timeout for its claim exits
// with the reason.
func TestPodMountsTheClaim(t *testing.T) {
	t.Parallel()
	p, client := volumePool(t, VolumeConfig{MountTimeout: time.Second})
	ev := &events{ch: make(chan pool.WorkerEvent, 8)}
	v := core.Volume{ID: "vol1", SizeGB: 10}
	spec := pool.WorkerSpec{ID: "w1", Endpoint: "ep", Image: "img", Volume: &v, Report: ev.report}
	if err := p.Start(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	pod, err := client.CoreV1().Pods("gpu").Get(t.Context(), PodName("w1"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var claim string
	for _, vol := range pod.Spec.Volumes {
		if vol.PersistentVolumeClaim != nil {
			claim = vol.PersistentVolumeClaim.ClaimName + "@" + vol.Name
		}
	}
	var mount corev1.VolumeMount
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		if m.MountPath == core.VolumeMountPath {
			mount = m
		}
	}
	if claim != "gantry-vol-vol1@"+mount.Name || mount.ReadOnly {
		t.Fatalf("pod volumes %+v, mounts %+v; want claim gantry-vol-vol1 mounted read-write at /runpod-volume",
			pod.Spec.Volumes, pod.Spec.Containers[0].VolumeMounts)
	}

	// The scheduler cannot place it for its claim: past the mount timeout, the worker exits,
	// saying why the claim was not bound where its events do.
	if _, err := client.CoreV1().Events("gpu").Create(t.Context(), &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: "gpu"},
		InvolvedObject: corev1.ObjectReference{Kind: "PersistentVolumeClaim", Name: "gantry-vol-vol1"}, Type: corev1.EventTypeWarning,
		Reason: "ProvisioningFailed", Message: `storageclass.storage.k8s.io "nfs" not found`}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Minute))
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled,
		Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims."}}}
	p.observe(pod)
	e := ev.next(t)
	var exit *ExitError
	if e.State != pool.WorkerExited || !errors.As(e.Err, &exit) || exit.Reason != "VolumeUnavailable" ||
		!strings.Contains(exit.Message, "gantry-vol-vol1") || !strings.Contains(exit.Message, "unbound immediate") ||
		!strings.Contains(exit.Message, `"nfs" not found`) {
		t.Errorf("event = %+v; want WorkerExited, VolumeUnavailable naming the claim, the scheduler's reason and the claim's event", e)
	}
}

// TestVolumeStuck: only a pending pod with a claim, past the mount timeout, is stuck; one
// unschedulable for want of GPUs is not; one placed whose container never started is, with
// its FailedMount event's message.
func TestVolumeStuck(t *testing.T) {
	t.Parallel()
	p, client := volumePool(t, VolumeConfig{MountTimeout: time.Minute})
	now := time.Now()
	pod := func(age time.Duration, node string, conds ...corev1.PodCondition) *corev1.Pod {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: PodName("w1"), Namespace: "gpu", UID: "u1",
			Labels: map[string]string{LabelWorker: "w1"}, CreationTimestamp: metav1.NewTime(now.Add(-age))},
			Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "worker"}}},
			Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: conds}}
		mountVolume(pod, core.Volume{ID: "vol1"})
		return pod
	}
	p.mu.Lock()
	p.workers["w1"] = &worker{id: "w1"}
	p.mu.Unlock()
	gpus := corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Message: "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."}
	if err := p.volumeStuck(pod(2*time.Minute, "", gpus), now); err != nil {
		t.Errorf("a pod waiting for GPUs: stuck = %v; want nil", err)
	}
	if err := p.volumeStuck(pod(30*time.Second, "node-a"), now); err != nil {
		t.Errorf("a pod within the mount timeout: stuck = %v; want nil", err)
	}
	if _, err := client.CoreV1().Events("gpu").Create(t.Context(), &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e1", Namespace: "gpu"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: PodName("w1"), UID: "u1"}, Reason: "FailedMount",
		Message: "MountVolume.SetUp failed: mount.nfs: Connection timed out", LastTimestamp: metav1.NewTime(now)}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := p.volumeStuck(pod(2*time.Minute, "node-a"), now)
	var exit *ExitError
	if !errors.As(err, &exit) || exit.Reason != "FailedMount" || !strings.Contains(exit.Message, "Connection timed out") {
		t.Errorf("a placed pod not started past the timeout: stuck = %v; want FailedMount with the event's message", err)
	}
	noClaim := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelWorker: "w1"}}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
	if err := p.volumeStuck(noClaim, now.Add(time.Hour)); err != nil {
		t.Errorf("a pod without a volume: stuck = %v; want nil", err)
	}
}
