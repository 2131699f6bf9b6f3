package runpodfake_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/adapters/runpod/rpapi"
	"github.com/gantryhq/gantry/adapters/runpod/runpodfake"
	"github.com/gantryhq/gantry/internal/testkit"
)

const key = "rp_test_key"

var gpu4090 = runpodfake.GPU{ID: "NVIDIA GeForce RTX 4090", Name: "RTX 4090", MemoryGB: 24, Price: 0.5, MaxCount: 8,
	CUDA: []string{"12.4", "12.8", "11.8"}}

type bearer string

func (b bearer) BearerAuth(context.Context, rpapi.OperationName) (rpapi.BearerAuth, error) {
	return rpapi.BearerAuth{Token: string(b)}, nil
}

// setup serves a fake on a stopped clock and returns it with a client holding key k.
func setup(t *testing.T, cfg runpodfake.Config, k string) (*runpodfake.Fake, *rpapi.Client, *testkit.Clock) {
	t.Helper()
	clock := testkit.NewClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	cfg.Key, cfg.Clock = key, clock
	if cfg.GPUs == nil {
		cfg.GPUs = []runpodfake.GPU{gpu4090}
	}
	f := runpodfake.New(cfg)
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	t.Cleanup(f.Close)
	c, err := rpapi.NewClient(srv.URL, bearer(k), rpapi.WithClient(srv.Client()))
	if err != nil {
		t.Fatal(err)
	}
	return f, c, clock
}

func create(t *testing.T, c *rpapi.Client, req rpapi.CreatePod) rpapi.CreatePodRes {
	t.Helper()
	res, err := c.CreatePod(context.Background(), &req)
	if err != nil {
		t.Fatalf("CreatePod(%+v) = %v", req, err)
	}
	return res
}

func gpuPod(name string) rpapi.CreatePod {
	return rpapi.CreatePod{Name: name, Image: "img", Gpu: rpapi.NewOptGpuRequest(rpapi.GpuRequest{ID: gpu4090.ID, Count: rpapi.NewOptInt(1)})}
}

// wantProblem fails unless res is an error answer of status whose detail contains detail.
func wantProblem(t *testing.T, what string, res any, status int, detail string) *rpapi.ProblemStatusCodeWithHeaders {
	t.Helper()
	p, ok := res.(*rpapi.ProblemStatusCodeWithHeaders)
	if !ok || p.StatusCode != status || !strings.Contains(p.Response.Detail, detail) {
		t.Fatalf("%s = %#v; want a %d problem saying %q", what, res, status, detail)
	}
	return p
}

func status(t *testing.T, c *rpapi.Client, id string) string {
	t.Helper()
	res, err := c.GetPod(context.Background(), rpapi.GetPodParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	p, ok := res.(*rpapi.PodHeaders)
	if !ok {
		t.Fatalf("GetPod(%s) = %#v", id, res)
	}
	return string(p.Response.Status)
}

func TestPodStatesFollowTheClock(t *testing.T) {
	t.Parallel()
	_, c, clock := setup(t, runpodfake.Config{Provision: 10 * time.Second, Boot: 20 * time.Second}, key)
	res := create(t, c, gpuPod("a"))
	p, ok := res.(*rpapi.PodHeaders)
	if !ok || p.Response.Status != rpapi.PodStatusPROVISIONING {
		t.Fatalf("CreatePod = %#v; want a PROVISIONING pod", res)
	}
	id := p.Response.ID
	for _, step := range []struct {
		by   time.Duration
		want string
	}{{9 * time.Second, "PROVISIONING"}, {time.Second, "STARTING"}, {19 * time.Second, "STARTING"}, {time.Second, "RUNNING"}} {
		clock.Advance(step.by)
		if got := status(t, c, id); got != step.want {
			t.Fatalf("at +%v: status %s; want %s", clock.Now().Sub(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)), got, step.want)
		}
	}
}

func TestActionsValidByStatus(t *testing.T) {
	t.Parallel()
	_, c, clock := setup(t, runpodfake.Config{Provision: time.Second, Boot: time.Second}, key)
	id := create(t, c, gpuPod("a")).(*rpapi.PodHeaders).Response.ID
	act := func(a rpapi.PodAction) rpapi.PodActionRes {
		t.Helper()
		res, err := c.PodAction(context.Background(), &rpapi.PodActionRequest{Action: a}, rpapi.PodActionParams{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	wantProblem(t, "start while PROVISIONING", act(rpapi.PodActionStart), http.StatusConflict, "not valid for a pod in status PROVISIONING")
	wantProblem(t, "restart while PROVISIONING", act(rpapi.PodActionRestart), http.StatusConflict, "PROVISIONING")
	clock.Advance(2 * time.Second)
	if got := act(rpapi.PodActionStop); got.(*rpapi.PodHeaders).Response.Status != rpapi.PodStatusEXITED {
		t.Fatalf("stop while RUNNING = %#v; want EXITED", got)
	}
	wantProblem(t, "stop while EXITED", act(rpapi.PodActionStop), http.StatusConflict, "EXITED")
	if got := act(rpapi.PodActionStart); got.(*rpapi.PodHeaders).Response.Status != rpapi.PodStatusSTARTING {
		t.Fatalf("start while EXITED = %#v; want STARTING", got)
	}
	clock.Advance(time.Second)
	if got := act(rpapi.PodActionRestart).(*rpapi.PodHeaders).Response; got.Status != rpapi.PodStatusSTARTING ||
		!slices.Equal(got.Actions, []rpapi.PodAction{rpapi.PodActionStop, rpapi.PodActionTerminate}) {
		t.Fatalf("restart while RUNNING = %+v; want STARTING allowing stop and terminate", got)
	}
	if _, ok := act(rpapi.PodActionTerminate).(*rpapi.PodActionNoContent); !ok {
		t.Fatal("terminate did not answer 204")
	}
	wantProblem(t, "an action on a terminated pod", act(rpapi.PodActionStart), http.StatusNotFound, id)
	res, _ := c.DeletePod(context.Background(), rpapi.DeletePodParams{ID: id})
	wantProblem(t, "DeletePod of a terminated pod", res, http.StatusNotFound, id)
}

func TestCreateRules(t *testing.T) {
	t.Parallel()
	f, c, _ := setup(t, runpodfake.Config{}, key)
	both := gpuPod("both")
	both.CPU = rpapi.NewOptCpuRequest(rpapi.CpuRequest{ID: "cpu3c"})
	wantProblem(t, "gpu and cpu", create(t, c, both), http.StatusBadRequest, "exactly one of gpu or cpu")
	wantProblem(t, "neither", create(t, c, rpapi.CreatePod{Name: "x", Image: "img"}), http.StatusBadRequest, "exactly one of gpu or cpu")
	cuda := gpuPod("cuda")
	cuda.Gpu.Value.AllowedCudaVersions = []string{"12.4"}
	cuda.Gpu.Value.MinCudaVersion = rpapi.NewOptString("12.0")
	wantProblem(t, "allowedCudaVersions and minCudaVersion", create(t, c, cuda), http.StatusBadRequest, "mutually exclusive")
	cuda.Gpu.Value.MinCudaVersion = rpapi.OptString{}
	cuda.Gpu.Value.AllowedCudaVersions = []string{"13.0"}
	wantProblem(t, "a CUDA version no machine runs", create(t, c, cuda), http.StatusBadRequest, "runs CUDA 13.0")
	cuda.Gpu.Value.AllowedCudaVersions = []string{"12.4", "11.8"}
	if p := create(t, c, cuda).(*rpapi.PodHeaders).Response; p.CudaVersion.Value != "12.4" {
		t.Errorf("a pod allowing CUDA 12.4 and 11.8 got %q; want the newest allowed, 12.4", p.CudaVersion.Value)
	}
	bad := gpuPod("bad")
	bad.Name = ""
	wantProblem(t, "an empty name", create(t, c, bad), http.StatusUnprocessableEntity, "name")

	f.FailCreates(1)
	wantProblem(t, "an injected capacity error", create(t, c, gpuPod("a")), http.StatusBadRequest, "no longer any instances available")
	create(t, c, gpuPod("b")) // only one was injected
	f.SetAvailability(gpu4090.ID, "NONE")
	wantProblem(t, "a GPU out of stock", create(t, c, gpuPod("c")), http.StatusBadRequest, "no longer any instances available")
}

func TestAuthAnswers(t *testing.T) {
	t.Parallel()
	_, c, _ := setup(t, runpodfake.Config{}, "wrong")
	res, err := c.ListPods(context.Background(), rpapi.ListPodsParams{})
	if err != nil {
		t.Fatal(err)
	}
	wantProblem(t, "ListPods with a wrong key", res, http.StatusUnauthorized, "invalid API key")
}

func TestForbidden(t *testing.T) {
	t.Parallel()
	f, c, _ := setup(t, runpodfake.Config{}, key)
	f.Forbid(true)
	res, err := c.ListPods(context.Background(), rpapi.ListPodsParams{})
	if err != nil {
		t.Fatal(err)
	}
	wantProblem(t, "ListPods with a key lacking permission", res, http.StatusForbidden, "permission")
}

func TestRateLimitHeaders(t *testing.T) {
	t.Parallel()
	f, c, clock := setup(t, runpodfake.Config{PerMinute: 2}, key)
	clock.Set(time.Date(2026, 11, 23, 12, 0, 45, 0, time.UTC)) // 15 s before the window resets
	for i := range 2 {
		res, err := c.ListPods(context.Background(), rpapi.ListPodsParams{})
		if err != nil {
			t.Fatal(err)
		}
		l, ok := res.(*rpapi.PodListHeaders)
		if !ok || l.RateLimitPolicy.Value != `"minute";q=2;w=60` {
			t.Fatalf("request %d: %#v; want pods with RateLimit-Policy \"minute\";q=2;w=60", i, res)
		}
	}
	res, _ := c.ListPods(context.Background(), rpapi.ListPodsParams{})
	p := wantProblem(t, "a third request in the minute", res, http.StatusTooManyRequests, "rate limit")
	if p.RetryAfter.Value != 15 || p.RateLimit.Value != `"minute";r=0;t=15` {
		t.Errorf("429 headers: Retry-After %v, RateLimit %v; want 15 and \"minute\";r=0;t=15", p.RetryAfter, p.RateLimit)
	}
	clock.Advance(15 * time.Second)
	if res, _ := c.ListPods(context.Background(), rpapi.ListPodsParams{}); res == nil {
		t.Fatal("no answer")
	} else if _, ok := res.(*rpapi.PodListHeaders); !ok {
		t.Errorf("after the reset: %#v; want pods", res)
	}
	f.Throttle(1, 7)
	res, _ = c.ListPods(context.Background(), rpapi.ListPodsParams{})
	if p := wantProblem(t, "an injected 429", res, http.StatusTooManyRequests, "rate limit"); p.RetryAfter.Value != 7 {
		t.Errorf("injected 429: Retry-After %v; want 7", p.RetryAfter)
	}
}

func TestPodsThatFailToStart(t *testing.T) {
	t.Parallel()
	f, c, clock := setup(t, runpodfake.Config{Boot: time.Second}, key)
	f.FailStart("img", "exec format error")
	id := create(t, c, gpuPod("a")).(*rpapi.PodHeaders).Response.ID
	clock.Advance(time.Second)
	if got := status(t, c, id); got != "ERROR" {
		t.Fatalf("status %s; want ERROR", got)
	}
	p, _ := f.Pod(id)
	if !strings.Contains(strings.Join(p.Log, "\n"), "exec format error") {
		t.Errorf("log %q; want the reason", p.Log)
	}
}

func TestCatalogAvailability(t *testing.T) {
	t.Parallel()
	_, c, _ := setup(t, runpodfake.Config{}, key)
	res, _ := c.ListGpuTypes(context.Background(), rpapi.ListGpuTypesParams{Include: []rpapi.ListGpuTypesIncludeItem{rpapi.ListGpuTypesIncludeItemAVAILABILITY}})
	wantProblem(t, "include=AVAILABILITY without product", res, http.StatusBadRequest, "needs product")
	res, err := c.ListGpuTypes(context.Background(), rpapi.ListGpuTypesParams{
		Include: []rpapi.ListGpuTypesIncludeItem{rpapi.ListGpuTypesIncludeItemAVAILABILITY},
		Product: []rpapi.ListGpuTypesProductItem{rpapi.ListGpuTypesProductItemPOD}})
	if err != nil {
		t.Fatal(err)
	}
	g := res.(*rpapi.GpuTypeListHeaders).Response.Gpus[0]
	if g.Availability.Value != rpapi.AvailabilityHIGH || len(g.CudaVersions) != 3 || g.Price.Secure != 0.5 {
		t.Errorf("catalog entry %+v; want HIGH, 3 CUDA versions, 0.5 USD/h", g)
	}
}

// TestStockChangesAtRunTime checks that the stock a test sets, per GPU type or per data
// center, is what the catalog reports and where creates place pods (or fail for capacity),
// and that a cudaVersions filter scopes both the stock and the versions listed.
func TestStockChangesAtRunTime(t *testing.T) {
	t.Parallel()
	two := gpu4090
	two.DataCenters = []string{"US-TX-3", "EU-RO-1"}
	f, c, _ := setup(t, runpodfake.Config{GPUs: []runpodfake.GPU{two}}, key)
	read := func(cuda ...string) rpapi.GpuType {
		t.Helper()
		res, err := c.ListGpuTypes(context.Background(), rpapi.ListGpuTypesParams{
			Include: []rpapi.ListGpuTypesIncludeItem{rpapi.ListGpuTypesIncludeItemAVAILABILITY},
			Product: []rpapi.ListGpuTypesProductItem{rpapi.ListGpuTypesProductItemPOD}, CudaVersions: cuda})
		if err != nil {
			t.Fatal(err)
		}
		return res.(*rpapi.GpuTypeListHeaders).Response.Gpus[0]
	}
	levels := func(g rpapi.GpuType) string {
		out := string(g.Availability.Or("absent"))
		for _, dc := range g.DataCenters {
			out += " " + dc.ID + "=" + string(dc.Availability)
		}
		return out
	}
	in := func(dcs ...string) rpapi.CreatePod {
		p := gpuPod("p")
		p.DataCenterIds = dcs
		return p
	}
	f.SetDataCenterAvailability(gpu4090.ID, "US-TX-3", "NONE")
	f.SetDataCenterAvailability(gpu4090.ID, "EU-RO-1", "LOW")
	if got, want := levels(read()), "LOW US-TX-3=NONE EU-RO-1=LOW"; got != want {
		t.Errorf("catalog with US-TX-3 out of stock: %s; want %s", got, want)
	}
	wantProblem(t, "a create allowing only the data center out of stock", create(t, c, in("US-TX-3")), http.StatusBadRequest, "no longer any instances available")
	if p := create(t, c, in("US-TX-3", "EU-RO-1")).(*rpapi.PodHeaders).Response; p.DataCenterId.Or("") != "EU-RO-1" {
		t.Errorf("a create allowing both data centers placed the pod in %q; want EU-RO-1, the one with stock", p.DataCenterId.Or(""))
	}
	f.SetAvailability(gpu4090.ID, "MEDIUM")
	if got, want := levels(read()), "MEDIUM US-TX-3=MEDIUM EU-RO-1=MEDIUM"; got != want {
		t.Errorf("catalog after SetAvailability(MEDIUM): %s; want %s", got, want)
	}
	if g := read("12.8", "13.0"); levels(g) != "MEDIUM US-TX-3=MEDIUM EU-RO-1=MEDIUM" || len(g.CudaVersions) != 1 || g.CudaVersions[0].Version != "12.8" {
		t.Errorf("catalog for CUDA 12.8 or 13.0: %s, versions %+v; want the stock, and only 12.8 listed", levels(g), g.CudaVersions)
	}
	if g := read("13.0"); levels(g) != "NONE" || len(g.CudaVersions) != 0 {
		t.Errorf("catalog for CUDA 13.0, which no machine runs: %s, versions %+v; want NONE, no data center, no version", levels(g), g.CudaVersions)
	}
}

// FuzzPodStateMachine drives one pod through random actions and clock steps: every answer
// agrees with the actions the pod listed just before (200 or 204 for one of them, 409 for any
// other), and the pod's status is always one RunPod documents.
func FuzzPodStateMachine(f *testing.F) {
	f.Add([]byte{0, 5, 1, 2, 3, 9, 4})
	f.Add([]byte{9, 9, 1, 0, 0, 2, 9, 3})
	f.Fuzz(func(t *testing.T, steps []byte) {
		if len(steps) > 64 {
			steps = steps[:64]
		}
		_, c, clock := setup(t, runpodfake.Config{Provision: 2 * time.Second, Boot: 3 * time.Second}, key)
		id := create(t, c, gpuPod("fuzz")).(*rpapi.PodHeaders).Response.ID
		all := []rpapi.PodAction{rpapi.PodActionStart, rpapi.PodActionStop, rpapi.PodActionRestart, rpapi.PodActionTerminate}
		for _, b := range steps {
			if b >= 4 {
				clock.Advance(time.Duration(b) * 100 * time.Millisecond)
				continue
			}
			res, err := c.GetPod(context.Background(), rpapi.GetPodParams{ID: id})
			if err != nil {
				t.Fatal(err)
			}
			pod, ok := res.(*rpapi.PodHeaders)
			if !ok {
				return // terminated
			}
			st := pod.Response.Status
			if !slices.Contains([]rpapi.PodStatus{"PROVISIONING", "STARTING", "RUNNING", "EXITED", "ERROR"}, st) {
				t.Fatalf("status %q", st)
			}
			a := all[b]
			got, err := c.PodAction(context.Background(), &rpapi.PodActionRequest{Action: a}, rpapi.PodActionParams{ID: id})
			if err != nil {
				t.Fatal(err)
			}
			p, refused := got.(*rpapi.ProblemStatusCodeWithHeaders)
			if valid := slices.Contains(pod.Response.Actions, a); valid == refused {
				t.Fatalf("%s on a %s pod (actions %v) answered %#v", a, st, pod.Response.Actions, got)
			}
			if refused && p.StatusCode != http.StatusConflict {
				t.Fatalf("%s on a %s pod: %d; want 409", a, st, p.StatusCode)
			}
		}
	})
}
