package main

import (
	"runtime"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
	"github.com/gantryhq/gantry/server"
	"github.com/gantryhq/gantry/server/servertest"
)

// warningPool keeps volumes but cannot mount them, and says so.
type warningPool struct{ *servertest.VolumePool }

func (warningPool) VolumeWarning() string { return `workers find the volume in "$GANTRY_VOLUME_PATH"` }

func TestCLIVolumes(t *testing.T) {
	t.Parallel()
	vp := servertest.NewVolumePool(core.PoolInfo{ID: "local", Adapter: "process", GPUType: "CPU", DisplayName: "CPU slot", GPUs: 4,
		PerWorker: 1, DataCenter: "LOCAL", CPU: true, VCPUs: runtime.NumCPU(), MemoryPerCPU: 1})
	r := newRig(t, server.Options{Pools: []pool.Pool{warningPool{vp}}})

	var v struct {
		ID, Name, DataCenter, Type string
		Size                       int
	}
	r.okJSON(&v, "volume", "create", "--name", "weights", "--size", "20", "--data-center", "LOCAL")
	if v.Name != "weights" || v.Size != 20 || v.DataCenter != "LOCAL" || v.Type != "STANDARD" {
		t.Errorf("created %+v; want weights, 20 GB in LOCAL, STANDARD", v)
	}
	if n, ok := vp.Size(v.ID); !ok || n != 20 {
		t.Errorf("the pool keeps %d GB (%v); want 20", n, ok)
	}
	if out := r.ok("volume", "list"); !strings.Contains(out, v.ID) || !strings.Contains(out, "20 GB") || !strings.Contains(out, "DATA CENTER") {
		t.Errorf("volume list = %s; want the volume in a table", out)
	}
	if out := r.ok("volume", "list", "-o", "id"); out != v.ID+"\n" {
		t.Errorf("volume list -o id = %q; want the id", out)
	}
	if out := r.ok("volume", "get", v.ID); !strings.Contains(out, "weights") {
		t.Errorf("volume get = %s", out)
	}
	r.okJSON(&v, "volume", "resize", v.ID, "--size", "40")
	if v.Size != 40 {
		t.Errorf("resized to %d GB; want 40", v.Size)
	}
	if res := r.run("volume", "resize", v.ID, "--size", "30"); res.code != exitFailed || !strings.Contains(res.err, "only grows") {
		t.Errorf("shrink: %v; want exit 2 saying a volume only grows", res)
	}
	if res := r.run("volume", "create", "--name", "x"); res.code != exitUsage || !strings.Contains(res.err, "required") {
		t.Errorf("create without size: %v; want a usage error", res)
	}

	// An endpoint naming it is warned of what the pool does instead of mounting it.
	res := r.run("endpoint", "create", "--name", "w", "--image", "gantry/echo", "--pool", "local", "--network-volume", v.ID)
	if want := `gantry: warning: pool local: workers find the volume in "$GANTRY_VOLUME_PATH"` + "\n"; res.code != 0 || !strings.Contains(res.err, want) {
		t.Errorf("endpoint create naming the volume: %v; want stderr to hold %q", res, want)
	}
	if res := r.run("volume", "delete", v.ID, "--yes"); res.code != exitFailed || !strings.Contains(res.err, "409") {
		t.Errorf("delete while an endpoint names it: %v; want exit 2 and the 409", res)
	}
	epID := strings.Fields(strings.Split(res.out, "\n")[1])[0]
	r.ok("endpoint", "delete", epID)

	// Delete asks first: anything but yes keeps the volume.
	if res := r.runWith(r.env, "no\n", "volume", "delete", v.ID); res.code != exitUsage || !strings.Contains(res.err, "not confirmed") {
		t.Errorf("delete answered no: %v; want not confirmed", res)
	}
	if _, ok := vp.Size(v.ID); !ok {
		t.Fatal("an unconfirmed delete removed the volume")
	}
	if res := r.runWith(r.env, "yes\n", "volume", "delete", v.ID); res.code != 0 || res.out != "Deleted network volume "+v.ID+".\n" {
		t.Errorf("delete answered yes: %v", res)
	}
	if _, ok := vp.Size(v.ID); ok {
		t.Error("a confirmed delete left the volume's data")
	}
	r.okJSON(&v, "volume", "create", "--name", "w2", "--size", "10", "--data-center", "LOCAL")
	if out := r.ok("volume", "delete", v.ID, "--yes"); !strings.Contains(out, "Deleted network volume") {
		t.Errorf("delete --yes = %q", out)
	}
}
