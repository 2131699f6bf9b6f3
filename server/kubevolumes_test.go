package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	kube "github.com/gantryhq/gantry/adapters/kubernetes"
)

// TestConfigKubernetesVolumes: a kubernetes pool's volumes section reaches the pool's
// config, and a misspelt key is refused with its path.
func TestConfigKubernetesVolumes(t *testing.T) {
	t.Parallel()
	const pool = "pools:\n  - id: k\n    adapter: kubernetes\n    gpuType: x\n    count: 1\n    kubernetes:\n"
	path := filepath.Join(t.TempDir(), "gantry.yaml")
	if err := os.WriteFile(path, []byte(pool+"      volumes: {storageClass: nfs, accessMode: ReadWriteOnce, mountTimeout: 90s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	want := kube.VolumeConfig{StorageClass: "nfs", AccessMode: "ReadWriteOnce", MountTimeout: 90 * time.Second}
	if got := c.Pools[0].Kubernetes.Volumes; got != want {
		t.Errorf("volumes = %+v; want %+v", got, want)
	}
	if err := os.WriteFile(path, []byte(pool+"      volumes: {storageClas: nfs}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(path); err == nil || !strings.Contains(err.Error(), ":7: pools[0].kubernetes.volumes.storageClas: unknown key") {
		t.Errorf("LoadConfig with a misspelt volumes key = %v; want it refused with its path", err)
	}
}
