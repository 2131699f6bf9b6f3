package kubecluster_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kube "github.com/gantryhq/gantry/adapters/kubernetes"
	"github.com/gantryhq/gantry/adapters/kubernetes/kubecluster"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testworker"
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
		if arg := os.Args[len(os.Args)-1]; arg == readsVolume {
			os.Exit(readVolume()) // volumes_test.go
		}
		os.Exit(testworker.Run(os.Args[len(os.Args)-1]))
	}
	os.Exit(m.Run())
}

// kubelet starts the test kubelet, running the test images as processes of this binary.
func kubelet(t *testing.T, c *kubecluster.Cluster) *kubecluster.Kubelet {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return kubecluster.NewKubelet(t, c, kubecluster.KubeletConfig{
		Images:  map[string][]string{testImage: {self, "-test.run=^$"}, echoImage: {self, "-test.run=^$", testworker.Echo}},
		Env:     []string{envWorkerMode + "=run"},
		Volumes: t.TempDir(),
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
	cfg := kube.Config{Pool: core.PoolInfo{ID: id, GPUType: "NVIDIA H100 80GB HBM3", GPUs: 8}, Client: client,
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
		// The pool deletes exited pods in the background: give those deletes time to land.
		var left []string
		deadline := time.Now().Add(wait)
		for {
			pods, err := c.Client.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{
				LabelSelector: kube.LabelPool + "=" + cfg.Pool.ID})
			if err != nil {
				t.Error(err)
				return
			}
			left = left[:0]
			for _, pod := range pods.Items {
				if pod.DeletionTimestamp == nil {
					left = append(left, fmt.Sprintf("%s (%s)", pod.Name, pod.Status.Phase))
				}
			}
			if len(left) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if len(left) > 0 {
			t.Errorf("pods of pool %s left after the test: %v", cfg.Pool.ID, left)
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
	return testworker.Env(strings.Split(string(b), "\n"))
}
