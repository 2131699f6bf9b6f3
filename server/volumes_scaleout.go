package server

import (
	"cmp"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gantryhq/gantry/pool"
	"github.com/gantryhq/gantry/scheduler"
)

// This file checks, for replicas on one store, where local pools keep network volumes (issue
// 30). Any replica stores a volume an API call creates or resizes through it (EnsureVolume on
// its own pool), the leader makes it ready again before each worker start, and any replica
// deletes it: a process or docker pool keeps a volume as a directory of this host, so the
// replicas share a volume's data only where they share that directory, which they do only
// when every replica names the same volumeRoot (one host, or a filesystem all of them mount).

// warnVolumeRoots logs a warning for each local pool that stores a data center's volumes in
// this replica's own data directory (<data>/volumes, the default when its section names no
// volumeRoot): another replica does not see that directory, so a volume created through one
// replica would be empty on a leader elsewhere. Only replicas on a shared store call it.
func warnVolumeRoots(cfg *Config, pools []pool.Pool, log *slog.Logger) {
	for _, id := range defaultRootPools(cfg, pools) {
		i := slices.IndexFunc(cfg.Pools, func(p PoolConfig) bool { return p.ID == id })
		section := cmp.Or(cfg.Pools[i].Adapter, "process")
		root, _ := filepath.Abs(filepath.Join(cfg.Data, volumesDir))
		log.Warn("network volumes are kept in this replica's own data directory: replicas share a volume's data only where they share its directory; set "+
			section+".volumeRoot to the same path on every replica (one host, or a filesystem all of them mount, such as NFS)",
			"pool", id, "dataCenter", cfg.Pools[i].DataCenter, "volumeRoot", root)
	}
}

// defaultRootPools returns the ids of the pools that store a data center's volumes (see
// scheduler.StoragePool) as local directories under the default root, <data>/volumes: process
// and docker pools whose section names no volumeRoot.
func defaultRootPools(cfg *Config, pools []pool.Pool) []string {
	var dcs []string
	for _, p := range pools {
		if dc := p.Describe().DataCenter; !slices.Contains(dcs, dc) {
			dcs = append(dcs, dc)
		}
	}
	var ids []string
	for _, dc := range dcs {
		sp, _, err := scheduler.StoragePool(pools, cfg.VolumeStorage, dc)
		if err != nil {
			continue // the data center keeps no volumes
		}
		id := sp.Describe().ID
		i := slices.IndexFunc(cfg.Pools, func(p PoolConfig) bool { return p.ID == id })
		if i < 0 || slices.Contains(ids, id) {
			continue
		}
		switch p := cfg.Pools[i]; cmp.Or(p.Adapter, "process") {
		case "process":
			if p.Process == nil || p.Process.VolumeRoot == "" {
				ids = append(ids, id)
			}
		case "docker": // with a remote engine and no volumeRoot it keeps none, and says so
			if p.Docker == nil || p.Docker.VolumeRoot == "" && localDocker(p.Docker.Host) {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// localDocker reports whether a docker pool of host ("" = $DOCKER_HOST, else the local
// socket) reaches a local engine: only then is its default volumeRoot <data>/volumes.
func localDocker(host string) bool {
	h := cmp.Or(host, os.Getenv("DOCKER_HOST"))
	return h == "" || strings.HasPrefix(h, "unix://")
}
