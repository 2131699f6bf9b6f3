package kubecluster_test

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kube "github.com/gantryhq/gantry/adapters/kubernetes"
	"github.com/gantryhq/gantry/adapters/kubernetes/kubecluster"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/server"
	"github.com/gantryhq/gantry/server/servertest"
)

// testJobs runs a whole Gantry configured as an operator would (a kubernetes pool reaching the
// cluster through a kubeconfig file): a job sent to an endpoint scaled to zero makes the
// scheduler create a pod, the real scheduler binds it to a GPU node, the test kubelet runs
// Gantry's echo worker with the pod's environment, and the worker takes the job and posts
// its output. An endpoint no node can hold is throttled with the cluster scheduler's reason
// on /health. When Gantry stops, its pods are deleted.
func testJobs(t *testing.T, c *kubecluster.Cluster, k *kubecluster.Kubelet) {
	addNodes(t, k, "jobs", 2, 2)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.Config{Pools: []server.PoolConfig{{
		PoolInfo: core.PoolInfo{ID: "k8s", Adapter: "kubernetes", GPUType: "NVIDIA H100 80GB HBM3", GPUs: 4},
		Kubernetes: &kube.Config{Kubeconfig: c.Kubeconfig(t), Namespace: namespace, Installation: "e2e",
			NodeSelector: map[string]string{groupLabel: "jobs"}, StopGrace: time.Second, UnschedulableAfter: time.Second},
	}}}
	t.Cleanup(func() { // runs after the server's shutdown, which deletes its pods
		testkit.EventuallyWithin(t, wait, "Gantry's pods gone after it stopped", func() bool {
			pods, err := c.Client.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: kube.LabelInstallation + "=e2e"})
			return err == nil && len(pods.Items) == 0
		})
	})
	s := servertest.New(t, cfg, server.Options{Self: self})
	key := servertest.Key(t, s, "alice", core.ScopeAll)

	var ep struct{ ID string }
	call(t, "POST", s.URL()+"/v2/serverless", key, `{"name":"echo","type":"QUEUE","templateId":"gantry-echo","gpu":{"pools":["k8s"]},`+
		`"scaling":{"type":"QUEUE_DELAY","queueDelay":4},"workers":{"max":1}}`, http.StatusCreated, &ep)
	var job struct {
		ID, Status string
		Output     map[string]any
	}
	call(t, "POST", s.URL()+"/v2/"+ep.ID+"/runsync?wait=60000", key, `{"input":{"prompt":"through the cluster"}}`, http.StatusOK, &job)
	for deadline := time.Now().Add(wait); (job.Status == "IN_QUEUE" || job.Status == "IN_PROGRESS") && time.Now().Before(deadline); {
		time.Sleep(time.Second) // within the key's rate limit
		call(t, "GET", s.URL()+"/v2/"+ep.ID+"/status/"+job.ID, key, "", http.StatusOK, &job)
	}
	if job.Status != "COMPLETED" || job.Output["prompt"] != "through the cluster" {
		t.Fatalf("job = %+v; want COMPLETED with the input echoed", job)
	}
	pods, err := c.Client.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{
		LabelSelector: kube.LabelEndpoint + "=" + ep.ID})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of the endpoint: %v, %v; want one", pods, err)
	}
	if pod := pods.Items[0]; !strings.HasPrefix(pod.Spec.NodeName, "jobs-") || pod.Spec.Containers[0].Image != echoImage {
		t.Errorf("pod on node %q, image %q; want a jobs node and %s", pod.Spec.NodeName, pod.Spec.Containers[0].Image, echoImage)
	}

	// An endpoint whose workers need more GPUs than any one node has (3: the pool has 4, on
	// two nodes) waits, throttled, with the cluster scheduler's reason; it is not a crash loop.
	var big struct{ ID string }
	call(t, "POST", s.URL()+"/v2/serverless", key, `{"name":"big","type":"QUEUE","templateId":"gantry-echo","gpu":{"pools":["k8s"],"count":3},`+
		`"scaling":{"type":"QUEUE_DELAY","queueDelay":4},"workers":{"max":1}}`, http.StatusCreated, &big)
	var queued struct{ ID, Status string }
	call(t, "POST", s.URL()+"/v2/"+big.ID+"/run", key, `{"input":{"n":1}}`, http.StatusOK, &queued)
	var health struct {
		Workers struct{ Throttled, Unhealthy int }
		Reason  string
	}
	for deadline := time.Now().Add(wait); health.Workers.Throttled != 1 && time.Now().Before(deadline); {
		time.Sleep(time.Second) // within the key's rate limit
		call(t, "GET", s.URL()+"/v2/"+big.ID+"/health", key, "", http.StatusOK, &health)
	}
	if health.Workers.Unhealthy != 0 || !strings.Contains(health.Reason, "Insufficient nvidia.com/gpu") {
		t.Errorf("/health of the big endpoint = %+v; want throttled with the scheduler's Insufficient nvidia.com/gpu", health)
	}
	var waiting struct{ Status, Reason string }
	call(t, "GET", s.URL()+"/v2/"+big.ID+"/status/"+queued.ID, key, "", http.StatusOK, &waiting)
	if waiting.Status != "IN_QUEUE" || !strings.Contains(waiting.Reason, "Insufficient nvidia.com/gpu") {
		t.Errorf("status of the big endpoint's job = %+v; want IN_QUEUE with the scheduler's reason", waiting)
	}
}

// call sends a request with the key and decodes the answer into into; it fails the test
// unless the status is want.
func call(t *testing.T, method, url, key, body string, want int, into any) {
	t.Helper()
	servertest.Expect(t, method, url, key, body, want, into)
}
