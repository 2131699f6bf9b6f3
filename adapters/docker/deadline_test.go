package docker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/adapters/adaptertest"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/pool"
)

// wedgedEngine is an Engine API server on 127.0.0.1 that never answers the calls hang names
// ("POST /containers/c1/pause"; a path without the API version), as a wedged dockerd does,
// and answers the rest as an engine with one image ("present") and one container ("c1")
// would. A container's wait is acknowledged at once and answers once release is closed.
type wedgedEngine struct {
	hang    map[string]bool
	release chan struct{}
}

func (e *wedgedEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if i := strings.Index(path[1:], "/"); strings.HasPrefix(path, "/v1.") && i > 0 {
		path = path[i+1:] // strip the API version
	}
	w.Header().Set("Api-Version", "1.41")
	call := r.Method + " " + path
	if e.hang[call] {
		select {
		case <-r.Context().Done():
		case <-e.release:
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	switch {
	case path == "/_ping":
		fmt.Fprint(w, "OK")
	case path == "/containers/json":
		fmt.Fprint(w, "[]")
	case call == "GET /images/present/json":
		fmt.Fprint(w, `{"Id":"sha256:1"}`)
	case strings.HasPrefix(path, "/images/") && strings.HasSuffix(path, "/json"):
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"message":"No such image"}`)
	case call == "POST /containers/create":
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"Id":"c1","Warnings":[]}`)
	case call == "POST /containers/c1/wait": // acknowledged at once, answered at the exit
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-e.release:
			fmt.Fprint(w, `{"StatusCode":0}`)
		}
	case call == "GET /containers/c1/json":
		fmt.Fprint(w, `{"Id":"c1","State":{"Running":false,"ExitCode":0}}`)
	case strings.HasPrefix(call, "POST /containers/c1/"), call == "DELETE /containers/c1":
		w.WriteHeader(http.StatusNoContent)
	default:
		w.WriteHeader(http.StatusNotImplemented)
		fmt.Fprint(w, `{"message":"not in the fake"}`)
	}
}

// wedged starts a wedgedEngine that hangs on calls, and returns its address for Config.Host.
func wedged(t *testing.T, calls ...string) string {
	t.Helper()
	e := &wedgedEngine{hang: map[string]bool{}, release: make(chan struct{})}
	for _, c := range calls {
		e.hang[c] = true
	}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close) // after the release below
	t.Cleanup(func() { close(e.release) })
	return "tcp://" + srv.Listener.Addr().String()
}

// fast are deadlines short enough for a test, and long enough that the calls the wedged engine
// does answer (its ping, above all) end within them on a loaded 2-core machine: at 100 ms,
// New's ping missed its deadline there while every package's tests ran.
var fast = Timeouts{Pull: 750 * time.Millisecond, Inspect: 500 * time.Millisecond, Change: 600 * time.Millisecond,
	Stop: 650 * time.Millisecond, Logs: 700 * time.Millisecond}

// wantTimeout checks that err is the deadline of call, set by setting, after d, and that it
// came well before the 10 s a wedged engine would have held the caller for in this test.
func wantTimeout(t *testing.T, what string, err error, took time.Duration, call, setting string, d time.Duration) {
	t.Helper()
	var te *EngineTimeoutError
	if !errors.As(err, &te) || te.Call != call || te.Setting != setting || te.After != d || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%s = %v; want the %s deadline of %s (%s)", what, err, setting, call, d)
		return
	}
	want := fmt.Sprintf("the Docker engine did not answer %s within %s", call, d)
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "docker.timeouts."+setting) {
		t.Errorf("%s = %q; want it to say %q and name docker.timeouts.%s", what, err, want, setting)
	}
	if took > 5*time.Second {
		t.Errorf("%s took %s; want it to end at its deadline, %s", what, took, d)
	}
}

// An engine that never answers fails each kind of call at its deadline, with an error naming
// the call and the setting, instead of holding the caller (issue 29, item 15).
func TestEngineCallDeadlines(t *testing.T) {
	t.Parallel()
	desc := core.PoolInfo{ID: "wedged", GPUType: "CPU", GPUs: 2, CPU: true}
	spec := func(id, image string) pool.WorkerSpec {
		return pool.WorkerSpec{ID: id, Endpoint: "ep", Image: image, Report: (&adaptertest.Recorder{}).Report}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a wedged call's bound without the fix
	t.Cleanup(cancel)                                                        // after the parallel subtests

	t.Run("ping", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		p, err := New(ctx, Config{Pool: desc, Host: wedged(t, "GET /_ping", "HEAD /_ping"), Timeouts: fast})
		if p != nil {
			p.Close()
		}
		wantTimeout(t, "New", err, time.Since(start), "Ping", "inspect", fast.Inspect)
	})
	for _, tc := range []struct {
		name, hang, image, call, setting string
		d                                time.Duration
	}{
		{"inspect", "GET /images/present/json", "present", "ImageInspect", "inspect", fast.Inspect},
		{"pull", "POST /images/create", "absent", "ImagePull", "pull", fast.Pull},
		{"create", "POST /containers/create", "present", "ContainerCreate", "change", fast.Change},
		{"wait", "POST /containers/c1/wait", "present", "ContainerWait", "inspect", fast.Inspect},
		{"start", "POST /containers/c1/start", "present", "ContainerStart", "change", fast.Change},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := New(ctx, Config{Pool: desc, Host: wedged(t, tc.hang), Timeouts: fast})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			start := time.Now()
			err = p.Start(ctx, spec("w1", tc.image))
			wantTimeout(t, "Start", err, time.Since(start), tc.call, tc.setting, tc.d)
		})
	}
	t.Run("pause and stop", func(t *testing.T) {
		t.Parallel()
		p, err := New(ctx, Config{Pool: desc, Host: wedged(t, "POST /containers/c1/pause", "POST /containers/c1/stop"),
			Timeouts: fast, StopGrace: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		if err := p.Start(ctx, spec("w1", "present")); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = p.Suspend(ctx, "w1")
		wantTimeout(t, "Suspend", err, time.Since(start), "ContainerPause", "change", fast.Change)
		start = time.Now()
		err = p.stopContainer(ctx, "c1")
		wantTimeout(t, "a container's stop", err, time.Since(start), "ContainerStop", "stop", time.Millisecond+fast.Stop)
	})
	t.Run("logs", func(t *testing.T) {
		t.Parallel()
		p, err := New(ctx, Config{Pool: desc, Host: wedged(t, "GET /containers/c1/logs"), Timeouts: fast})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		if err := p.Start(ctx, spec("w1", "present")); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = p.Logs(ctx, "w1", 10)
		wantTimeout(t, "Logs", err, time.Since(start), "ContainerLogs", "logs", fast.Logs)
	})
	// The caller's own deadline is not the engine's: its error is the caller's.
	t.Run("caller's deadline", func(t *testing.T) {
		t.Parallel()
		p, err := New(ctx, Config{Pool: desc, Host: wedged(t, "GET /images/present/json")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		var te *EngineTimeoutError
		if err := p.Start(short, spec("w1", "present")); errors.As(err, &te) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Start with the caller's deadline = %v; want the caller's deadline, not the engine's", err)
		}
	})
}

// Unset deadlines take their defaults; a negative one is refused.
func TestTimeoutsDefaults(t *testing.T) {
	t.Parallel()
	got := Timeouts{Inspect: time.Second}.withDefaults()
	want := Timeouts{Pull: DefaultPullTimeout, Inspect: time.Second, Change: DefaultChangeTimeout, Stop: DefaultStopTimeout, Logs: DefaultLogsTimeout}
	if got != want {
		t.Errorf("withDefaults = %+v; want %+v", got, want)
	}
	_, err := New(context.Background(), Config{Pool: core.PoolInfo{ID: "p", GPUType: "CPU", GPUs: 1, CPU: true}, Timeouts: Timeouts{Pull: -time.Second}})
	if err == nil || !strings.Contains(err.Error(), "timeouts.pull -1s is negative") {
		t.Errorf("New with a negative pull deadline = %v; want it refused", err)
	}
}
