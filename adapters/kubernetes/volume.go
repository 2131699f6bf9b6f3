package kubernetes

// This file is the pool's network volumes (pool.VolumeStorage): each Gantry volume is one
// PersistentVolumeClaim in the pool's namespace (ClaimName), of the configured storage class
// and access mode, requesting the volume's size; a worker's pod mounts the claim read-write at
// core.VolumeMountPath. The cluster's provisioner makes the storage; a resize patches the
// claim's request (the class must allow volume expansion). A worker whose claim cannot be
// bound or mounted within VolumeConfig.MountTimeout exits with the reason (volumeStuck), so it
// never runs a job without its volume.

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// LabelVolume and AnnotationVolume name the Gantry volume a claim keeps (the label only when
// the id is a valid label value; the annotation always).
const (
	LabelVolume      = "gantry.io/volume"
	AnnotationVolume = "gantry.io/volume"
)

// DefaultMountTimeout is VolumeConfig.MountTimeout's default.
const DefaultMountTimeout = 2 * time.Minute

// podVolumeName is the name of the claim's volume in a worker pod's spec.
const podVolumeName = "runpod-volume"

// VolumeConfig configures the claims that keep the pool's network volumes.
type VolumeConfig struct {
	// StorageClass is the claims' storageClassName; "" = the cluster's default class. It must
	// support AccessMode, and allow volume expansion for a resize to take effect.
	StorageClass string `yaml:"storageClass"`
	// AccessMode is the claims' access mode: ReadWriteMany (the default: every worker of every
	// endpoint on any node mounts it), ReadWriteOnce (the workers of one node only) or
	// ReadWriteOncePod (one worker at a time).
	AccessMode string `yaml:"accessMode"`
	// MountTimeout is how long a worker's pod may wait for its claim to be bound and mounted
	// before the worker fails with the reason; default DefaultMountTimeout.
	MountTimeout time.Duration `yaml:"mountTimeout"`
}

// check applies the defaults and validates the config.
func (c *VolumeConfig) check() error {
	c.AccessMode = cmp.Or(c.AccessMode, string(corev1.ReadWriteMany))
	c.MountTimeout = cmp.Or(c.MountTimeout, DefaultMountTimeout)
	switch corev1.PersistentVolumeAccessMode(c.AccessMode) {
	case corev1.ReadWriteMany, corev1.ReadWriteOnce, corev1.ReadWriteOncePod:
	default:
		return fmt.Errorf("volumes.accessMode %q: want ReadWriteMany, ReadWriteOnce or ReadWriteOncePod (workers write to their volume)", c.AccessMode)
	}
	if c.StorageClass != "" {
		if errs := validation.IsDNS1123Subdomain(c.StorageClass); len(errs) > 0 {
			return fmt.Errorf("volumes.storageClass %q: %s", c.StorageClass, strings.Join(errs, "; "))
		}
	}
	if c.MountTimeout < 0 {
		return fmt.Errorf("volumes.mountTimeout %v: want a positive duration", c.MountTimeout)
	}
	return nil
}

// ClaimName is the name of the PersistentVolumeClaim that keeps Gantry volume id:
// gantry-vol-<id>, with an id that is not a DNS label made one and told apart by a hash.
func ClaimName(id string) string {
	name := "gantry-vol-" + id
	if len(validation.IsDNS1123Label(name)) == 0 {
		return name
	}
	b := []byte(strings.ToLower(id))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			b[i] = '-'
		}
	}
	sum := sha256.Sum256([]byte(id))
	return "gantry-vol-" + strings.Trim(string(b[:min(len(b), 32)]), "-") + "-" + hex.EncodeToString(sum[:4])
}

// claim renders v's claim.
func (p *Pool) claim(v core.Volume) *corev1.PersistentVolumeClaim {
	labels := map[string]string{LabelInstallation: p.cfg.Installation}
	if len(validation.IsValidLabelValue(v.ID)) == 0 {
		labels[LabelVolume] = v.ID
	}
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: ClaimName(v.ID), Namespace: p.cfg.Namespace, Labels: labels,
			Annotations: map[string]string{AnnotationVolume: v.ID}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.PersistentVolumeAccessMode(p.cfg.Volumes.AccessMode)},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: *resource.NewQuantity(int64(v.SizeGB)<<30, resource.BinarySI)}},
		},
	}
	if p.cfg.Volumes.StorageClass != "" {
		c.Spec.StorageClassName = new(p.cfg.Volumes.StorageClass)
	}
	return c
}

// EnsureVolume creates v's claim, or grows its request to v.SizeGB (in GiB) when it asks for
// less; it never shrinks one. It does not wait for the claim to be bound: with a
// WaitForFirstConsumer class that happens only once a pod uses it (implements
// pool.VolumeStorage).
func (p *Pool) EnsureVolume(ctx context.Context, v core.Volume) error {
	api := p.cfg.Client.CoreV1().PersistentVolumeClaims(p.cfg.Namespace)
	want := p.claim(v)
	have, err := api.Get(ctx, want.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if _, err = api.Create(ctx, want, metav1.CreateOptions{}); err == nil {
			p.cfg.Log.Info("volume claim created", "volume", v.ID, "claim", want.Name, "gb", v.SizeGB,
				"storageClass", p.cfg.Volumes.StorageClass, "accessMode", p.cfg.Volumes.AccessMode)
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("volume %s: creating claim %s: %w", v.ID, want.Name, err)
		}
		have, err = api.Get(ctx, want.Name, metav1.GetOptions{}) // another replica made it
	}
	if err != nil {
		return fmt.Errorf("volume %s: reading claim %s: %w", v.ID, want.Name, err)
	}
	if err := p.ours(have, v); err != nil {
		return err
	}
	if have.DeletionTimestamp != nil {
		return fmt.Errorf("volume %s: claim %s is being deleted", v.ID, have.Name)
	}
	size := want.Spec.Resources.Requests[corev1.ResourceStorage]
	if cur := have.Spec.Resources.Requests[corev1.ResourceStorage]; cur.Cmp(size) >= 0 {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"resources": map[string]any{
		"requests": map[string]string{string(corev1.ResourceStorage): size.String()}}}})
	if _, err := api.Patch(ctx, have.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("volume %s: growing claim %s to %s (its storage class must allow volume expansion): %w", v.ID, have.Name, size.String(), err)
	}
	p.cfg.Log.Info("volume claim grown", "volume", v.ID, "claim", have.Name, "gb", v.SizeGB)
	return nil
}

// ours says whether a claim is this installation's claim of v.
func (p *Pool) ours(c *corev1.PersistentVolumeClaim, v core.Volume) error {
	if c.Labels[LabelInstallation] != p.cfg.Installation || c.Annotations[AnnotationVolume] != v.ID {
		return fmt.Errorf("volume %s: claim %s/%s exists but is not this installation's claim of it (installation %q, volume %q)",
			v.ID, c.Namespace, c.Name, c.Labels[LabelInstallation], c.Annotations[AnnotationVolume])
	}
	return nil
}

// DeleteVolume deletes v's claim; with the reclaim policy Delete (dynamic provisioning's
// default) the cluster then deletes its storage and data. No claim is not an error (implements
// pool.VolumeStorage).
func (p *Pool) DeleteVolume(ctx context.Context, v core.Volume) error {
	api := p.cfg.Client.CoreV1().PersistentVolumeClaims(p.cfg.Namespace)
	name := ClaimName(v.ID)
	have, err := api.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("volume %s: reading claim %s: %w", v.ID, name, err)
	}
	if err := p.ours(have, v); err != nil {
		return err
	}
	err = api.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &have.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("volume %s: deleting claim %s: %w", v.ID, name, err)
	}
	p.cfg.Log.Info("volume claim deleted", "volume", v.ID, "claim", name)
	return nil
}

// VolumeUsage answers -1: a claim does not say how much of it is used (implements
// pool.VolumeStorage).
func (p *Pool) VolumeUsage(context.Context, core.Volume) (int64, error) { return -1, nil }

// mountVolume adds v's claim to a worker's pod, mounted read-write at core.VolumeMountPath.
func mountVolume(pod *corev1.Pod, v core.Volume) {
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: podVolumeName, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: ClaimName(v.ID)}}})
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: podVolumeName, MountPath: core.VolumeMountPath})
}

// claimOf is the claim a worker pod mounts at core.VolumeMountPath ("" = none).
func claimOf(pod *corev1.Pod) string {
	for _, v := range pod.Spec.Volumes {
		if v.Name == podVolumeName && v.PersistentVolumeClaim != nil {
			return v.PersistentVolumeClaim.ClaimName
		}
	}
	return ""
}

// volumeStuck says why a pending pod's volume keeps it from running once it has waited
// longer than the mount timeout: the cluster scheduler cannot place it for its claim
// (unbound, missing, being deleted, out of the nodes' reach; with the claim's latest warning
// event, such as its provisioner's ProvisioningFailed), or it was placed and its container
// was not started (the volume was not attached or mounted; with the pod's latest FailedMount
// or FailedAttachVolume event). Events are added where Gantry may read them. nil = not stuck,
// or not for its volume.
func (p *Pool) volumeStuck(pod *corev1.Pod, now time.Time) error {
	claim := claimOf(pod)
	if claim == "" || pod.Status.Phase != corev1.PodPending || pod.DeletionTimestamp != nil ||
		now.Sub(pod.CreationTimestamp.Time) < p.cfg.Volumes.MountTimeout {
		return nil
	}
	p.mu.Lock()
	w := p.workers[pod.Labels[LabelWorker]]
	live := w != nil && !w.exited
	p.mu.Unlock()
	if !live {
		return nil
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			if !mentionsVolume(c.Message) {
				return nil // waiting for room, not for its volume
			}
			msg := fmt.Sprintf("the worker's volume (claim %s) cannot be used: %s", claim, c.Message)
			if ev := p.latestEvent(pod.Namespace, "PersistentVolumeClaim", claim, "", corev1.EventTypeWarning); ev != "" {
				msg += "; the claim: " + ev // e.g. its provisioner's ProvisioningFailed
			}
			return &ExitError{Reason: "VolumeUnavailable", Message: msg}
		}
	}
	if pod.Spec.NodeName == "" {
		return nil
	}
	msg := fmt.Sprintf("the worker's volume (claim %s) was not mounted within %v", claim, p.cfg.Volumes.MountTimeout)
	if ev := p.latestEvent(pod.Namespace, "Pod", pod.Name, pod.UID, "", "FailedMount", "FailedAttachVolume"); ev != "" {
		msg += ": " + ev
	}
	return &ExitError{Reason: "FailedMount", Message: msg}
}

// mentionsVolume says whether a cluster scheduler's message is about a pod's volumes.
func mentionsVolume(msg string) bool {
	m := strings.ToLower(msg)
	for _, s := range []string{"persistentvolume", "persistent volume", "pvc", "free storage"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// latestEvent is the message of the latest event of an object (of that uid, when given) of
// type typ and one of reasons (any, when none); "" if none, or events cannot be read.
func (p *Pool) latestEvent(ns, kind, name string, uid types.UID, typ string, reasons ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := p.cfg.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=" + kind + ",involvedObject.name=" + name})
	if err != nil {
		return ""
	}
	var last *corev1.Event
	for i := range list.Items {
		e := &list.Items[i]
		if e.InvolvedObject.Kind != kind || e.InvolvedObject.Name != name || (uid != "" && e.InvolvedObject.UID != uid) ||
			(typ != "" && e.Type != typ) || (len(reasons) > 0 && !slices.Contains(reasons, e.Reason)) {
			continue
		}
		if last == nil || e.LastTimestamp.After(last.LastTimestamp.Time) {
			last = e
		}
	}
	if last == nil {
		return ""
	}
	return last.Message
}

var _ pool.VolumeStorage = (*Pool)(nil)
