package kubernetes

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gantryhq/gantry/adapters/kit"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// This file is the adapter's registration: Build, which reaches the cluster a config file's
// section names, and the interface guards of Pool.

var (
	_ pool.Pool         = (*Pool)(nil)
	_ pool.Elastic      = (*Pool)(nil)
	_ pool.Adopter      = (*Pool)(nil)
	_ pool.LogSource    = (*Pool)(nil)
	_ pool.WorkerLister = (*Pool)(nil)
)

// Adapter is the kubernetes adapter as the config file names it (adapter: kubernetes).
var Adapter = kit.Adapter[Config]{Name: "kubernetes", Build: Build, Grace: grace}

// Build makes a kubernetes pool from its description and its section (nil: the defaults:
// in-cluster credentials, namespace default): it makes the client from Kubeconfig, Context,
// QPS and Burst, takes WorkerURL's default from the server's publicUrl and the registry
// credentials and logger from env, and gives New a minute to sync its watches.
func Build(ctx context.Context, env kit.Env, desc core.PoolInfo, c *Config) (pool.Pool, error) {
	cfg := Config{}
	if c != nil {
		cfg = *c
	}
	var rc *rest.Config
	var err error
	if cfg.Kubeconfig == "" {
		rc, err = rest.InClusterConfig()
	} else {
		rc, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: cfg.Kubeconfig},
			&clientcmd.ConfigOverrides{CurrentContext: cfg.Context}).ClientConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("reaching the cluster: %w", err)
	}
	rc.QPS, rc.Burst = cmp.Or(cfg.QPS, DefaultQPS), cmp.Or(cfg.Burst, DefaultBurst)
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("reaching the cluster: %w", err)
	}
	cfg.Pool, cfg.Client, cfg.Log = desc, client, env.Log
	cfg.WorkerURL = cmp.Or(cfg.WorkerURL, env.PublicURL)
	if env.Credential != nil {
		cfg.Credentials = func(ctx context.Context, id string) (Credential, error) {
			k, err := env.Credential(ctx, id)
			return Credential{Username: k.Username, Password: k.Password, Server: k.Server}, err
		}
	}
	start, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return New(start, cfg)
}

// grace is how long a kubernetes pool's pods may take to stop: their termination grace.
func grace(c *Config) time.Duration {
	if c != nil && c.StopGrace > 0 {
		return c.StopGrace
	}
	return DefaultStopGrace
}
