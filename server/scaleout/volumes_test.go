package scaleout_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gantryhq/gantry/adapters/process"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/pgtest"
	"github.com/gantryhq/gantry/server"
	"github.com/gantryhq/gantry/server/servertest"
	"github.com/gantryhq/gantry/worker"
)

// volumeWorker is the built-in worker this test binary runs for image gantry/volfiles (its
// process pool's Self is the binary): input {"write":{name:content},"read":[name...]} writes
// and reads files in its network volume, at $GANTRY_VOLUME_PATH (/runpod-volume where the
// pool mounts it); the output is {"path":..., "files":{name:content}} ("!" and the error for
// a file it cannot read).
const volumeWorker = "volfiles"

// runWorker runs the built-in worker name as a worker process and returns its exit status.
func runWorker(name string) int {
	if name != volumeWorker {
		fmt.Fprintf(os.Stderr, "no built-in worker %q in this test binary\n", name)
		return 2
	}
	cfg, err := worker.ConfigFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err = worker.Run(ctx, cfg, func(_ context.Context, job *worker.Job, _ worker.Responder) (any, error) {
		var in struct {
			Write map[string]string
			Read  []string
		}
		if err := json.Unmarshal(job.Input, &in); err != nil {
			return nil, err
		}
		dir := cmp.Or(os.Getenv(process.VolumeEnv), core.VolumeMountPath)
		for name, content := range in.Write {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				return nil, err
			}
		}
		files := map[string]string{}
		for _, name := range in.Read {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				b = []byte("!" + err.Error())
			}
			files[name] = string(b)
		}
		return map[string]any{"path": dir, "files": files}, nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// volumeReplicas starts n replicas on one fresh database, each with its own data directory and
// a process pool "local" (data center LOCAL) that runs this test binary's workers and keeps
// network volumes under root ("" = the default, the replica's <data>/volumes); log, when not
// nil, receives every replica's log.
func volumeReplicas(t *testing.T, n int, root string, log *slog.Logger) []*server.Server {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	url := pgtest.URL(t)
	rs := make([]*server.Server, n)
	for i := range rs {
		cfg := server.Config{Store: url, Pools: []server.PoolConfig{{
			PoolInfo: core.PoolInfo{ID: "local", GPUType: "CPU", GPUs: 2, CPU: true, DataCenter: "LOCAL"},
			Process:  &process.Config{VolumeRoot: root},
		}}}
		rs[i] = servertest.New(t, cfg, server.Options{Tick: 100 * time.Millisecond, LeaseTTL: leaseTTL,
			Self: self, Builtins: []string{"echo", "image", "video", "speech", "text", volumeWorker}, Log: log}) // the models' too, never run

	}
	return rs
}

// volumeJob runs a job of the endpoint through r (runsync) and returns its output's files,
// checking that the worker found its volume at want.
func volumeJob(t *testing.T, r *server.Server, key, ep, input, want string) map[string]string {
	t.Helper()
	code, body := call(t, "POST", r.URL()+"/v2/"+ep+"/runsync", key, `{"input":`+input+`}`)
	var out struct {
		Status string
		Output struct {
			Path  string
			Files map[string]string
		}
	}
	if err := json.Unmarshal([]byte(body), &out); code != 200 || err != nil || out.Status != "COMPLETED" {
		t.Fatalf("runsync on %s = %d %s; want 200 COMPLETED", r.URL(), code, body)
	}
	if out.Output.Path != want {
		t.Errorf("the worker found its volume at %q; want %q", out.Output.Path, want)
	}
	return out.Output.Files
}

// TestVolumesAcrossReplicas: two replicas sharing one volumeRoot. A volume created through
// the follower is stored there and listed by both; a worker the leader starts reads a file
// put in it on the host and writes one; once the leader is gone, the new leader's worker of the
// same endpoint reads both. The data outlives the worker and the leader.
func TestVolumesAcrossReplicas(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	var logs lockedBuffer
	rs := volumeReplicas(t, 2, root, slog.New(slog.NewTextHandler(&logs, nil)))
	l := leader(t, rs)
	ld, fl := rs[l], rs[1-l]
	key := servertest.Key(t, fl, "alice", core.ScopeAll)

	var vol struct{ ID string }
	servertest.Expect(t, "POST", fl.URL()+"/v2/network-volumes", key, `{"name":"weights","size":10,"dataCenter":"LOCAL"}`, 201, &vol)
	dir := filepath.Join(root, vol.ID)
	if err := os.WriteFile(filepath.Join(dir, "weights.txt"), []byte("weights v1"), 0o644); err != nil {
		t.Fatalf("the follower made no directory for the volume it created: %v", err)
	}
	for _, r := range rs {
		if code, body := call(t, "GET", r.URL()+"/v2/network-volumes", key, ""); code != 200 || !strings.Contains(body, vol.ID) {
			t.Errorf("list volumes on %s = %d %s; want 200 listing %s", r.URL(), code, body, vol.ID)
		}
	}

	var ep struct{ ID string }
	servertest.Expect(t, "POST", fl.URL()+"/v2/serverless", key,
		`{"name":"vol","type":"QUEUE","image":"gantry/`+volumeWorker+`","gpu":{"pools":["local"]},"scaling":{"type":"QUEUE_DELAY","queueDelay":4},"workers":{"max":1,"idleTimeout":5},"networkVolumes":["`+vol.ID+`"]}`,
		201, &ep)
	// Where the pool can mount it, the worker finds the volume at /runpod-volume; elsewhere at
	// its directory ($GANTRY_VOLUME_PATH).
	want := dir
	if os.Geteuid() == 0 {
		if w, ok := ld.Pools()[0].(interface{ VolumeWarning() string }); ok && w.VolumeWarning() == "" {
			want = core.VolumeMountPath
		}
	}
	files := volumeJob(t, fl, key, ep.ID, `{"write":{"note.txt":"written before failover"},"read":["weights.txt"]}`, want)
	if files["weights.txt"] != "weights v1" {
		t.Errorf("the leader's worker read weights.txt = %q; want the file put in the volume", files["weights.txt"])
	}
	if b, err := os.ReadFile(filepath.Join(dir, "note.txt")); err != nil || string(b) != "written before failover" {
		t.Errorf("note.txt in the volume's directory = %q, %v; want what the worker wrote", b, err)
	}

	// The leader goes, its worker with it; the follower leads and starts a worker of its own.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := ld.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown of the leader = %v", err)
	}
	ld.Close()
	leader(t, []*server.Server{fl})
	files = volumeJob(t, fl, key, ep.ID, `{"read":["weights.txt","note.txt"]}`, want)
	if files["weights.txt"] != "weights v1" || files["note.txt"] != "written before failover" {
		t.Errorf("after failover the new leader's worker read %v; want weights v1 and the note written before", files)
	}
	if code, body := call(t, "GET", fl.URL()+"/v2/network-volumes/"+vol.ID, key, ""); code != 200 || !strings.Contains(body, vol.ID) {
		t.Errorf("get the volume on the new leader = %d %s; want 200", code, body)
	}
	if strings.Contains(logs.String(), "own data directory") {
		t.Errorf("replicas sharing a volumeRoot were warned of their own data directory:\n%s", logs.String())
	}
}

// TestVolumeRootWarning: a replica whose process pool keeps volumes under its own data
// directory (no volumeRoot) says at start that the others do not share them.
func TestVolumeRootWarning(t *testing.T) {
	t.Parallel()
	var logs lockedBuffer
	volumeReplicas(t, 1, "", slog.New(slog.NewTextHandler(&logs, nil)))
	out := logs.String()
	if !strings.Contains(out, "network volumes are kept in this replica's own data directory") ||
		!strings.Contains(out, "set process.volumeRoot to the same path on every replica") || !strings.Contains(out, "pool=local") {
		t.Errorf("log of a replica keeping volumes under its data directory:\n%s\nwant a warning naming pool local and process.volumeRoot", out)
	}
}

// lockedBuffer is a log destination several goroutines write to.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
