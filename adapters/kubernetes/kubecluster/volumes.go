package kubecluster

// This file is the test kubelet's storage: with KubeletConfig.Volumes set it is also the
// provisioner of StorageClass (a host directory per claim, <Volumes>/pvc/<namespace>/<claim>,
// as a hostPath PersistentVolume bound to the claim; a grown request grows the volume; a
// deleted claim's volume and directory are deleted, as with reclaim policy Delete), and it
// "mounts" a pod's claims: the pod's process cannot see a path such as /runpod-volume (no
// mount namespaces here), so it gets MountsEnv, which maps each mount path to the host
// directory, and reads through HostPath. A pod whose claim cannot be mounted stays Pending
// with its container ContainerCreating and a FailedMount event, as a kubelet leaves it.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
)

// StorageClass is the storage class the test kubelet provisions (Immediate binding, volume
// expansion allowed).
const StorageClass = "gantry-test-hostpath"

// MountsEnv is the environment variable that maps a pod's mount paths to host directories:
// a JSON object {"/runpod-volume": "/tmp/.../pvc/default/gantry-vol-x"}.
const MountsEnv = "GANTRY_TEST_MOUNTS"

// HostPath is where a pod's process finds p: p under the host directory of the mount that
// holds it (MountsEnv), else p itself.
func HostPath(p string) string {
	var mounts map[string]string
	if json.Unmarshal([]byte(os.Getenv(MountsEnv)), &mounts) != nil {
		return p
	}
	best := ""
	for m := range mounts {
		if (p == m || strings.HasPrefix(p, strings.TrimSuffix(m, "/")+"/")) && len(m) > len(best) {
			best = m
		}
	}
	if best == "" {
		return p
	}
	return filepath.Join(mounts[best], strings.TrimPrefix(p, best))
}

// ClaimDir is the host directory of a claim the test kubelet provisioned.
func (k *Kubelet) ClaimDir(namespace, claim string) string {
	return filepath.Join(k.cfg.Volumes, "pvc", namespace, claim)
}

// startProvisioner creates StorageClass and watches claims of it. It stops with ctx.
func (k *Kubelet) startProvisioner(ctx context.Context) (stop func(), err error) {
	immediate, del := storagev1.VolumeBindingImmediate, corev1.PersistentVolumeReclaimDelete
	_, err = k.c.Client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: StorageClass}, Provisioner: "gantry.test/hostpath",
		AllowVolumeExpansion: new(true), VolumeBindingMode: &immediate, ReclaimPolicy: &del}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating storage class %s: %w", StorageClass, err)
	}
	factory := informers.NewSharedInformerFactory(k.c.Client, 0)
	inf := factory.Core().V1().PersistentVolumeClaims().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { k.provision(ctx, o.(*corev1.PersistentVolumeClaim)) },
		UpdateFunc: func(_, o any) { k.provision(ctx, o.(*corev1.PersistentVolumeClaim)) },
	}); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("the test kubelet's claim watch did not sync")
	}
	return factory.Shutdown, nil
}

// provision acts on a claim of StorageClass: binds a new one to a hostPath volume, grows a
// bound one's volume to its request, and removes a deleted one's volume, directory and
// finalizers (what the claim-protection controller, not running here, would do).
func (k *Kubelet) provision(ctx context.Context, c *corev1.PersistentVolumeClaim) {
	if c.Spec.StorageClassName == nil || *c.Spec.StorageClassName != StorageClass {
		return
	}
	err := k.provisionClaim(ctx, c)
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "test kubelet: claim %s/%s: %v\n", c.Namespace, c.Name, err)
	}
}

func (k *Kubelet) provisionClaim(ctx context.Context, c *corev1.PersistentVolumeClaim) error {
	claims, pvs := k.c.Client.CoreV1().PersistentVolumeClaims(c.Namespace), k.c.Client.CoreV1().PersistentVolumes()
	pvName := "pvc-" + string(c.UID)
	dir := k.ClaimDir(c.Namespace, c.Name)
	if c.DeletionTimestamp != nil {
		if pv, err := pvs.Get(ctx, pvName, metav1.GetOptions{}); err == nil {
			if len(pv.Finalizers) > 0 {
				_, _ = pvs.Patch(ctx, pvName, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			}
			_ = pvs.Delete(ctx, pvName, metav1.DeleteOptions{})
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		if len(c.Finalizers) > 0 {
			_, err := claims.Patch(ctx, c.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			return err
		}
		return nil
	}
	size := c.Spec.Resources.Requests[corev1.ResourceStorage]
	if c.Spec.VolumeName == "" {
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return err
		}
		pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvName},
			Spec: corev1.PersistentVolumeSpec{Capacity: corev1.ResourceList{corev1.ResourceStorage: size},
				AccessModes: c.Spec.AccessModes, StorageClassName: StorageClass,
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
				ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: c.Namespace,
					Name: c.Name, UID: c.UID},
				PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}}}}
		created, err := pvs.Create(ctx, pv, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			created, err = pvs.Get(ctx, pvName, metav1.GetOptions{})
		}
		if err != nil {
			return err
		}
		created.Status.Phase = corev1.VolumeBound
		if _, err := pvs.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return err
		}
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := claims.Get(ctx, c.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if cur.Spec.VolumeName == "" {
				cur.Spec.VolumeName = pvName
				if cur.Annotations == nil {
					cur.Annotations = map[string]string{}
				}
				cur.Annotations["pv.kubernetes.io/bind-completed"] = "yes"
				cur.Annotations["pv.kubernetes.io/bound-by-controller"] = "yes"
				if cur, err = claims.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
					return err
				}
			}
			cur.Status.Phase, cur.Status.AccessModes = corev1.ClaimBound, cur.Spec.AccessModes
			cur.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: size}
			_, err = claims.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
			return err
		})
	}
	if have := c.Status.Capacity[corev1.ResourceStorage]; c.Status.Phase != corev1.ClaimBound || have.Cmp(size) >= 0 {
		return nil
	}
	// A resize: the volume grows, then the claim's capacity says so.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pv, err := pvs.Get(ctx, c.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pv.Spec.Capacity = corev1.ResourceList{corev1.ResourceStorage: size}
		_, err = pvs.Update(ctx, pv, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return err
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := claims.Get(ctx, c.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: cur.Spec.Resources.Requests[corev1.ResourceStorage]}
		_, err = claims.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

// mountVolumes resolves the pod's claim mounts to host directories, as MountsEnv's value
// ("" = none). While a claim cannot be mounted (missing, unbound, not a hostPath volume) the
// pod stays Pending, ContainerCreating, with a FailedMount event, and the kubelet tries again;
// it returns false when the pod was deleted meanwhile (and is finished) or the kubelet stops.
func (k *Kubelet) mountVolumes(ctx context.Context, r *run, pod *corev1.Pod) (string, bool) {
	warned := false
	for {
		env, err := k.resolveMounts(ctx, pod)
		if err == nil {
			return env, true
		}
		if !warned {
			warned = true
			c := pod.Spec.Containers[0]
			k.status(ctx, r, func(s *corev1.PodStatus) {
				s.Phase = corev1.PodPending
				s.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, Image: c.Image,
					State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
			})
			now := metav1.Now()
			_, _ = k.c.Client.CoreV1().Events(pod.Namespace).Create(ctx, &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", pod.Name, time.Now().UnixNano()), Namespace: pod.Namespace},
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
				Reason:         "FailedMount", Type: corev1.EventTypeWarning, Message: err.Error(), Count: 1,
				FirstTimestamp: now, LastTimestamp: now, Source: corev1.EventSource{Component: "kubelet", Host: r.node},
			}, metav1.CreateOptions{})
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-r.deleting:
			k.finish(ctx, r)
			return "", false
		case <-ctx.Done():
			return "", false
		}
	}
}

// resolveMounts maps each of the container's mounts of a claim to its volume's host
// directory (and subPath).
func (k *Kubelet) resolveMounts(ctx context.Context, pod *corev1.Pod) (string, error) {
	claims := map[string]string{} // pod volume name -> claim
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claims[v.Name] = v.PersistentVolumeClaim.ClaimName
		}
	}
	mounts := map[string]string{}
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		name, ok := claims[m.Name]
		if !ok {
			continue
		}
		c, err := k.c.Client.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("Unable to attach or mount volumes: claim %s: %w", name, err)
		}
		if c.Spec.VolumeName == "" || c.Status.Phase != corev1.ClaimBound {
			return "", fmt.Errorf("Unable to attach or mount volumes: claim %s is not bound", name)
		}
		pv, err := k.c.Client.CoreV1().PersistentVolumes().Get(ctx, c.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("Unable to attach or mount volumes: volume %s: %w", c.Spec.VolumeName, err)
		}
		if pv.Spec.HostPath == nil {
			return "", fmt.Errorf("MountVolume.SetUp failed for volume %s: the test kubelet mounts hostPath volumes only", pv.Name)
		}
		if _, err := os.Stat(pv.Spec.HostPath.Path); err != nil {
			return "", fmt.Errorf("MountVolume.SetUp failed for volume %s: %w", pv.Name, err)
		}
		mounts[m.MountPath] = filepath.Join(pv.Spec.HostPath.Path, path.Clean("/"+m.SubPath))
	}
	if len(mounts) == 0 {
		return "", nil
	}
	b, _ := json.Marshal(mounts)
	return string(b), nil
}
