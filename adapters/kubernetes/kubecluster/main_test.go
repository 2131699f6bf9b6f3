package kubecluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kube "github.com/gantryhq/gantry/adapters/kubernetes"
	"github.com/gantryhq/gantry/adapters/kubernetes/kubecluster"
	"github.com/gantryhq/gantry/core"
	gworker "github.com/gantryhq/gantry/worker"
	"github.com/gantryhq/gantry/worker/echo"
)

// The test binary is also the pods' containers: the test kubelet runs it again with
// envWorkerMode set, and it then behaves as its last argument says instead of testing.
const (
	envWorkerMode = "GANTRY_KUBE_TEST_WORKER"
	testImage     = "gantry-test/worker" // args: serves, crashes or ignores
	echoImage     = "gantry/echo"        // Gantry's echo worker (the gantry-echo template's image)
	testGrace     = time.Second          // the pools' stop grace (Kubernetes counts whole seconds)
	namespace     = "default"
)

func TestMain(m *testing.M) {
	if os.Getenv(envWorkerMode) != "" {
		os.Exit(testWorker(os.Args[len(os.Args)-1]))
	}
	os.Exit(m.Run())
}

// testWorker is a pod's container: "serves" prints its environment and runs until SIGTERM,
// "crashes" exits with status 37, "ignores" ignores SIGTERM, "echo" runs Gantry's echo worker.
func testWorker(arg string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	switch arg {
	case "echo":
		cfg, err := gworker.ConfigFromEnv()
		if err != nil {
			fmt.Println("worker config:", err)
			return 2
		}
		if err := gworker.Run(ctx, cfg, echo.Handler); err != nil {
			fmt.Println("worker:", err)
			return 1
		}
		return 0
	case "crashes":
		fmt.Println("crashing on purpose")
		return 37
	case "ignores":
		signal.Ignore(syscall.SIGTERM)
	}
	env := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	b, _ := json.Marshal(env)
	fmt.Printf("GANTRY_TEST_ENV %s\n", b)
	if arg == "ignores" {
		select {}
	}
	<-ctx.Done()
	return 0
}

// kubelet starts the test kubelet, running the test images as processes of this binary.
func kubelet(t *testing.T, c *kubecluster.Cluster) *kubecluster.Kubelet {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return kubecluster.NewKubelet(t, c, kubecluster.KubeletConfig{
		Images: map[string][]string{testImage: {self, "-test.run=^$"}, echoImage: {self, "-test.run=^$", "echo"}},
		Env:    []string{envWorkerMode + "=run"},
	})
}

// addNodes adds n fake nodes of gpus GPUs each, labelled with the test's group.
func addNodes(t *testing.T, k *kubecluster.Kubelet, group string, n, gpus int) {
	t.Helper()
	for i := range n {
		if err := k.AddNode(context.Background(), kubecluster.Node{Name: fmt.Sprintf("%s-%d", group, i), GPUs: gpus,
			Product: "NVIDIA-H100-80GB-HBM3", Labels: map[string]string{groupLabel: group}}); err != nil {
			t.Fatal(err)
		}
	}
}

// groupLabel keeps the subtests' nodes apart: each pool selects its group's nodes.
const groupLabel = "gantry.test/group"

// newPool makes a pool on the group's nodes with its own client (the default QPS and burst);
// the test fails if the pool leaves a pod behind.
func newPool(t *testing.T, c *kubecluster.Cluster, group string, change func(*kube.Config)) *kube.Pool {
	t.Helper()
	client, err := c.ClientFor(kube.DefaultQPS, kube.DefaultBurst, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := group + "-" + strings.ToLower(core.NewID(5))
	cfg := kube.Config{Pool: core.Pool{ID: id, GPUType: "NVIDIA H100 80GB HBM3", GPUs: 8}, Client: client,
		Namespace: namespace, Installation: "test", NodeSelector: map[string]string{groupLabel: group},
		StopGrace: testGrace, UnschedulableAfter: 500 * time.Millisecond, Log: slog.New(slog.DiscardHandler)}
	if change != nil {
		change(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := kube.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Close()
		pods, err := c.Client.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{
			LabelSelector: kube.LabelPool + "=" + cfg.Pool.ID})
		if err != nil {
			t.Error(err)
			return
		}
		for _, pod := range pods.Items {
			if pod.DeletionTimestamp == nil {
				t.Errorf("pod %s (%s) of pool %s is left after the test", pod.Name, pod.Status.Phase, cfg.Pool.ID)
			}
		}
	})
	return p
}

// podEnv reads the environment a test worker printed, through the API server's pods/log
// (which asks the test kubelet), once it has.
func podEnv(c *kubecluster.Cluster, worker string) (map[string]string, bool) {
	rc, err := c.Client.CoreV1().Pods(namespace).GetLogs(kube.PodName(worker), &corev1.PodLogOptions{}).Stream(context.Background())
	if err != nil {
		return nil, false
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	for _, line := range strings.Split(string(b), "\n") {
		if j, ok := strings.CutPrefix(line, "GANTRY_TEST_ENV "); ok {
			env := map[string]string{}
			if json.Unmarshal([]byte(j), &env) == nil {
				return env, true
			}
		}
	}
	return nil, false
}
