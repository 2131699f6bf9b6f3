package server

import (
	"cmp"
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	kube "github.com/gantryhq/gantry/adapters/kubernetes"
	"github.com/gantryhq/gantry/pool"
)

// kubernetesAdapter builds pools of worker pods (adapters/kubernetes).
var kubernetesAdapter = adapter{
	build: func(ctx context.Context, env poolEnv, p PoolConfig) (pool.Pool, error) {
		k := cmp.Or(p.Kubernetes, &KubernetesConfig{})
		var rc *rest.Config
		var err error
		if k.Kubeconfig == "" {
			rc, err = rest.InClusterConfig()
		} else {
			rc, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
				&clientcmd.ClientConfigLoadingRules{ExplicitPath: k.Kubeconfig},
				&clientcmd.ConfigOverrides{CurrentContext: k.Context}).ClientConfig()
		}
		if err != nil {
			return nil, fmt.Errorf("reaching the cluster: %w", err)
		}
		rc.QPS, rc.Burst = cmp.Or(k.QPS, kube.DefaultQPS), cmp.Or(k.Burst, kube.DefaultBurst)
		client, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return nil, fmt.Errorf("reaching the cluster: %w", err)
		}
		var tols []corev1.Toleration
		for _, t := range k.Tolerations {
			tols = append(tols, corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOperator(cmp.Or(t.Operator, "Equal")),
				Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
		}
		start, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		return kube.New(start, kube.Config{Pool: p.PoolInfo, Client: client, Namespace: k.Namespace,
			Installation: k.Installation, NodeSelector: k.NodeSelector, Tolerations: tols,
			RuntimeClassName: k.RuntimeClassName, PriorityClassName: k.PriorityClassName,
			ServiceAccount: k.ServiceAccount, Labels: k.Labels, Annotations: k.Annotations, CPU: k.CPU,
			Memory: k.Memory, ShmGB: k.ShmGB, StopGrace: k.StopGrace, Capacity: k.Capacity, UnschedulableAfter: k.UnschedulableAfter,
			WorkerURL: cmp.Or(k.WorkerURL, env.cfg.PublicURL), Credentials: env.cfg.kubeCredential, Log: env.log})
	},
	section: func(p PoolConfig) bool { return p.Kubernetes != nil },
	grace: func(p PoolConfig) time.Duration {
		if p.Kubernetes != nil && p.Kubernetes.StopGrace > 0 {
			return p.Kubernetes.StopGrace
		}
		return kube.DefaultStopGrace
	},
}

func init() { adapters["kubernetes"] = kubernetesAdapter }

// kubeCredential is a configured registry credential for a pod's imagePullSecret.
func (c *Config) kubeCredential(ctx context.Context, id string) (kube.Credential, error) {
	d, err := c.credential(ctx, id)
	if err != nil {
		return kube.Credential{}, err
	}
	return kube.Credential{Username: d.Username, Password: d.Password, Server: d.ServerAddress}, nil
}
