package kubernetes

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantryhq/gantry/adapters/kit"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// resources returns the requests and limits of a worker holding n GPUs (or CPU slots):
// nvidia.com/gpu = n in both on GPU pools (extended resources cannot be overcommitted), CPU
// and memory requests per slot on CPU pools.
func resources(d core.PoolInfo, n int, cfg Config) (req, lim corev1.ResourceList, err error) {
	if !d.CPU {
		q := *resource.NewQuantity(int64(n), resource.DecimalSI)
		return corev1.ResourceList{GPUResource: q}, corev1.ResourceList{GPUResource: q}, nil
	}
	cpu, err := resource.ParseQuantity(cfg.CPU)
	if err != nil {
		return nil, nil, fmt.Errorf("cpu %q: %w", cfg.CPU, err)
	}
	mem, err := resource.ParseQuantity(cfg.Memory)
	if err != nil {
		return nil, nil, fmt.Errorf("memory %q: %w", cfg.Memory, err)
	}
	cpu.SetMilli(cpu.MilliValue() * int64(n))
	mem.Set(mem.Value() * int64(n))
	return corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem}, nil, nil
}

// podSpec renders a worker's pod.
func (p *Pool) podSpec(ctx context.Context, spec pool.WorkerSpec) (*corev1.Pod, error) {
	n := max(spec.GPUCount, len(spec.GPUs), 1)
	req, lim, err := resources(p.desc, n, p.cfg)
	if err != nil {
		return nil, err
	}
	if spec.Disk > 0 {
		req[corev1.ResourceEphemeralStorage] = *resource.NewScaledQuantity(int64(spec.Disk), resource.Giga)
		if lim == nil {
			lim = corev1.ResourceList{}
		}
		lim[corev1.ResourceEphemeralStorage] = req[corev1.ResourceEphemeralStorage]
	}
	labels := maps.Clone(p.cfg.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, map[string]string{LabelInstallation: p.cfg.Installation, LabelPool: p.desc.ID,
		LabelEndpoint: spec.Endpoint, LabelWorker: spec.ID})
	var env []corev1.EnvVar
	spec.Env = kit.RebaseEnv(spec.Env, p.cfg.WorkerURL)
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		env = append(env, corev1.EnvVar{Name: k, Value: spec.Env[k]})
	}
	var ports []corev1.ContainerPort
	for _, k := range slices.Sorted(maps.Keys(spec.PortEnv)) { // a pod has its own network
		port := spec.PortEnv[k]
		if !slices.ContainsFunc(ports, func(c corev1.ContainerPort) bool { return c.ContainerPort == int32(port) }) {
			ports = append(ports, corev1.ContainerPort{ContainerPort: int32(port), Protocol: corev1.ProtocolTCP})
		}
		if _, set := spec.Env[k]; !set {
			env = append(env, corev1.EnvVar{Name: k, Value: strconv.Itoa(port)})
		}
	}
	shm := resource.NewScaledQuantity(int64(p.cfg.ShmGB), resource.Giga)
	grace := int64(p.cfg.StopGrace.Seconds())
	automount := p.cfg.ServiceAccount != ""
	var tolerations []corev1.Toleration
	for _, t := range p.cfg.Tolerations {
		tolerations = append(tolerations, corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOperator(cmp.Or(t.Operator, "Equal")),
			Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	tolerations = append(tolerations,
		corev1.Toleration{Key: string(GPUResource), Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	annotations := maps.Clone(p.cfg.Annotations)
	if spec.Revision != "" {
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[AnnotationRevision] = spec.Revision
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: PodName(spec.ID), Namespace: p.cfg.Namespace, Labels: labels,
			Annotations: annotations},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			NodeSelector:                  maps.Clone(p.cfg.NodeSelector),
			Tolerations:                   tolerations,
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  &automount,
			ServiceAccountName:            p.cfg.ServiceAccount,
			PriorityClassName:             p.cfg.PriorityClassName,
			EnableServiceLinks:            new(false),
			Containers: []corev1.Container{{
				Name:         "worker",
				Image:        spec.Image,
				Args:         strings.Fields(spec.Args),
				Env:          env,
				Ports:        ports,
				Resources:    corev1.ResourceRequirements{Requests: req, Limits: lim},
				VolumeMounts: []corev1.VolumeMount{{Name: "dshm", MountPath: "/dev/shm"}},
			}},
			Volumes: []corev1.Volume{{Name: "dshm", VolumeSource: corev1.VolumeSource{
				EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: shm}}}},
		},
	}
	if spec.Volume != nil {
		mountVolume(pod, *spec.Volume) // volume.go
	}
	if p.cfg.RuntimeClassName != "" {
		pod.Spec.RuntimeClassName = new(p.cfg.RuntimeClassName)
	}
	if spec.Registry != "" {
		secret, err := p.pullSecret(ctx, spec.Registry)
		if err != nil {
			return nil, err
		}
		pod.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: secret}}
	}
	return pod, nil
}

// pullSecret creates or updates the imagePullSecret of a registry id from its credential and
// returns its name.
func (p *Pool) pullSecret(ctx context.Context, registry string) (string, error) {
	if p.cfg.Credentials == nil {
		return "", fmt.Errorf("registry %q: the pool has no registry credentials", registry)
	}
	c, err := p.cfg.Credentials(ctx, registry)
	if err != nil {
		return "", fmt.Errorf("registry %q: %w", registry, err)
	}
	if c.Server == "" {
		return "", fmt.Errorf("registry %q: a Kubernetes pull secret needs the registry's server", registry)
	}
	auth := base64.StdEncoding.EncodeToString([]byte(c.Username + ":" + c.Password))
	cfg, _ := json.Marshal(map[string]any{"auths": map[string]any{c.Server: map[string]string{
		"username": c.Username, "password": c.Password, "auth": auth}}})
	name := "gantry-registry-" + strings.ToLower(registry)
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.cfg.Namespace,
			Labels: map[string]string{LabelInstallation: p.cfg.Installation}},
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: cfg},
	}
	api := p.cfg.Client.CoreV1().Secrets(p.cfg.Namespace)
	if _, err := api.Update(ctx, s, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
		_, err = api.Create(ctx, s, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("registry %q: creating its pull secret: %w", registry, err)
		}
	} else if err != nil {
		return "", fmt.Errorf("registry %q: updating its pull secret: %w", registry, err)
	}
	return name, nil
}
