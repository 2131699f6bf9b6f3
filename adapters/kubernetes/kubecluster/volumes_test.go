package kubecluster_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantryhq/gantry/adapters/adaptertest"
	kube "github.com/gantryhq/gantry/adapters/kubernetes"
	"github.com/gantryhq/gantry/adapters/kubernetes/kubecluster"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/pool"
)

// readsVolume is the test image's argument for a worker that reads hello.txt from its volume
// at /runpod-volume, prints it (readLine), writes from-<pod>.txt there and runs until SIGTERM.
// The test kubelet's processes see /runpod-volume through kubecluster.HostPath.
const (
	readsVolume = "reads-volume"
	readLine    = "GANTRY_TEST_READ "
)

func readVolume() int {
	b, err := os.ReadFile(kubecluster.HostPath(core.VolumeMountPath + "/hello.txt"))
	if err != nil {
		fmt.Println("reading the volume:", err)
		return 1
	}
	fmt.Printf("%s%s\n", readLine, b)
	out := kubecluster.HostPath(core.VolumeMountPath + "/from-" + os.Getenv("HOSTNAME") + ".txt")
	if err := os.WriteFile(out, []byte("written by the worker"), 0o644); err != nil {
		fmt.Println("writing the volume:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return 0
}

// testVolumes: a network volume is a claim of the configured class, mode and size, bound by
// the test kubelet to a host directory; a resize patches its request; a worker's pod mounts it
// at /runpod-volume, and the worker process reads the file the test put there and writes one
// the test finds; a worker whose claim does not exist fails with the cluster scheduler's
// reason, never running; DeleteVolume deletes the claim and (reclaim Delete) its data.
func testVolumes(t *testing.T, c *kubecluster.Cluster, k *kubecluster.Kubelet) {
	addNodes(t, k, "volumes", 1, 8)
	p := newPool(t, c, "volumes", func(cfg *kube.Config) {
		cfg.Volumes = kube.VolumeConfig{StorageClass: kubecluster.StorageClass, MountTimeout: 3 * time.Second}
	})
	ctx := context.Background()
	v := core.Volume{ID: "weights-" + strings.ToLower(core.NewID(5)), SizeGB: 10, DataCenter: "k8s"}
	claims := c.Client.CoreV1().PersistentVolumeClaims(namespace)
	name := kube.ClaimName(v.ID)
	if err := p.EnsureVolume(ctx, v); err != nil {
		t.Fatal(err)
	}
	var claim *corev1.PersistentVolumeClaim
	testkit.EventuallyWithin(t, wait, "the claim bound", func() bool {
		var err error
		claim, err = claims.Get(ctx, name, metav1.GetOptions{})
		return err == nil && claim.Status.Phase == corev1.ClaimBound
	})
	req := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	if claim.Spec.StorageClassName == nil || *claim.Spec.StorageClassName != kubecluster.StorageClass ||
		len(claim.Spec.AccessModes) != 1 || claim.Spec.AccessModes[0] != corev1.ReadWriteMany || req.String() != "10Gi" {
		t.Fatalf("claim %s: class %v, modes %v, request %s; want %s, ReadWriteMany, 10Gi", name, claim.Spec.StorageClassName,
			claim.Spec.AccessModes, req.String(), kubecluster.StorageClass)
	}

	v.SizeGB = 20 // the API server's claim-resize admission lets it through: the class allows expansion
	if err := p.EnsureVolume(ctx, v); err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyWithin(t, wait, "the claim grown to 20Gi", func() bool {
		claim, err := claims.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		req, got := claim.Spec.Resources.Requests[corev1.ResourceStorage], claim.Status.Capacity[corev1.ResourceStorage]
		return req.String() == "20Gi" && got.String() == "20Gi"
	})

	dir := k.ClaimDir(namespace, name)
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("model weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := &adaptertest.Recorder{}
	spec := pool.WorkerSpec{ID: "vol-" + strings.ToLower(core.NewID(5)), Endpoint: "ep", Image: testImage, Args: readsVolume,
		Volume: &v, Report: rec.Report}
	if err := p.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	rec.Wait(t, spec.ID, pool.WorkerRunning, wait)
	pod, err := c.Client.CoreV1().Pods(namespace).Get(ctx, kube.PodName(spec.ID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mounted := false
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		for _, pv := range pod.Spec.Volumes {
			if pv.Name == m.Name && pv.PersistentVolumeClaim != nil && pv.PersistentVolumeClaim.ClaimName == name {
				mounted = m.MountPath == core.VolumeMountPath && !m.ReadOnly
			}
		}
	}
	if !mounted {
		t.Errorf("pod %s: volumes %+v, mounts %+v; want claim %s read-write at %s", pod.Name, pod.Spec.Volumes,
			pod.Spec.Containers[0].VolumeMounts, name, core.VolumeMountPath)
	}
	written := filepath.Join(dir, "from-"+kube.PodName(spec.ID)+".txt")
	testkit.EventuallyWithin(t, wait, "the worker read the volume and wrote to it", func() bool {
		_, err := os.Stat(written)
		return err == nil && strings.Contains(podLog(c, spec.ID), readLine+"model weights")
	})
	if err := p.Stop(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	rec.Wait(t, spec.ID, pool.WorkerExited, wait)

	// A worker whose volume has no claim: the cluster scheduler cannot place its pod, and past
	// the mount timeout the worker exits with the reason, its process never started.
	missing := core.Volume{ID: "missing-" + strings.ToLower(core.NewID(5)), SizeGB: 10}
	bad := pool.WorkerSpec{ID: "vol-" + strings.ToLower(core.NewID(5)), Endpoint: "ep", Image: testImage, Args: readsVolume,
		Volume: &missing, Report: rec.Report}
	if err := p.Start(ctx, bad); err != nil {
		t.Fatal(err)
	}
	e := rec.Wait(t, bad.ID, pool.WorkerExited, wait)
	var exit *kube.ExitError
	if !errors.As(e.Err, &exit) || exit.Reason != "VolumeUnavailable" || !strings.Contains(exit.Message, kube.ClaimName(missing.ID)) {
		t.Errorf("exit of a worker whose claim is missing = %v; want VolumeUnavailable naming the claim", e.Err)
	}
	if !k.Started(namespace, kube.PodName(bad.ID)).IsZero() {
		t.Error("the worker whose claim is missing was started")
	}

	if err := p.DeleteVolume(ctx, v); err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyWithin(t, wait, "the claim and its data gone", func() bool {
		_, err := claims.Get(ctx, name, metav1.GetOptions{})
		_, statErr := os.Stat(dir)
		return apierrors.IsNotFound(err) && os.IsNotExist(statErr)
	})
}

// podLog is the output of a worker's pod so far, through the API server's pods/log.
func podLog(c *kubecluster.Cluster, worker string) string {
	rc, err := c.Client.CoreV1().Pods(namespace).GetLogs(kube.PodName(worker), &corev1.PodLogOptions{}).Stream(context.Background())
	if err != nil {
		return ""
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	return string(b)
}
