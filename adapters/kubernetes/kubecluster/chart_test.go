package kubecluster_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	kube "github.com/gantryhq/gantry/adapters/kubernetes"
	"github.com/gantryhq/gantry/adapters/kubernetes/kubecluster"
	"github.com/gantryhq/gantry/adapters/kubernetes/kubecluster/chart"
	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/server"
	"github.com/gantryhq/gantry/server/servertest"
)

// serviceMonitorCRD is enough of the Prometheus Operator's CustomResourceDefinition for the
// API server to accept the chart's ServiceMonitor.
const serviceMonitorCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: servicemonitors.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {kind: ServiceMonitor, listKind: ServiceMonitorList, plural: servicemonitors, singular: servicemonitor}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

// install renders the chart for a release with values and creates every object it renders,
// failing the test for each one the API server refuses.
func install(t *testing.T, c *kubecluster.Cluster, rel chart.Release, values map[string]any) []chart.Manifest {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rel.Namespace}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	ms, err := chart.Render(chart.Dir(), rel, values)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if err := c.Apply(ctx, m.YAML); err != nil {
			t.Errorf("the API server refused the chart's %s (%s): %v", m.Kind, m.Source, err)
		}
	}
	return ms
}

// saClient is a client of the cluster that authenticates as a service account.
func saClient(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// access is one request an account may or may not make.
type access struct {
	verb, resource, sub, ns string
	allowed                 bool
}

// checkAccess asks the API server's authorizer (SubjectAccessReview) whether the service
// account may make each request.
func checkAccess(t *testing.T, c *kubecluster.Cluster, ns, account string, cases []access) {
	t.Helper()
	for _, a := range cases {
		r, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User:   "system:serviceaccount:" + ns + ":" + account,
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: a.verb, Resource: a.resource,
					Subresource: a.sub, Namespace: a.ns},
			}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Allowed != a.allowed {
			what := a.resource
			if a.sub != "" {
				what += "/" + a.sub
			}
			t.Errorf("%s may %s %s in %s: %v; want %v", account, a.verb, what, cmpOr(a.ns, "the cluster"), r.Status.Allowed, a.allowed)
		}
	}
}

func cmpOr(s, or string) string {
	if s == "" {
		return or
	}
	return s
}

// testChart installs Gantry's Helm chart (deploy/helm/gantry) on the API server, whose
// authorization is RBAC: every object it renders is accepted (strict field validation, with
// the optional Ingress and ServiceMonitor on). A Gantry configured by the chart's ConfigMap,
// whose Kubernetes pool authenticates as the chart's ServiceAccount (a TokenRequest token, as
// its pod would mount), runs a job in a pod the real scheduler placed, reads the worker's log
// and deletes its pod when it stops. The account is refused what the pool does not use:
// secrets, other namespaces, nodes, even get on pods. A second release with
// rbac.clusterCapacity and rbac.registrySecrets gets exactly what those add.
func testChart(t *testing.T, c *kubecluster.Cluster, k *kubecluster.Kubelet) {
	addNodes(t, k, "chart", 1, 2)
	ctx := context.Background()
	if err := c.Apply(ctx, serviceMonitorCRD); err != nil {
		t.Fatal(err)
	}
	const ns = "gantry-chart"
	pool := map[string]any{"id": "k8s", "gpuType": "NVIDIA H100 80GB HBM3", "count": 2, "maxGpusPerWorker": 2,
		"kubernetes": map[string]any{"nodeSelector": map[string]any{groupLabel: "chart"}, "stopGrace": "1s", "unschedulableAfter": "1s"}}
	ms := install(t, c, chart.Release{Name: "gantry", Namespace: ns}, map[string]any{
		"store":          map[string]any{"existingSecret": "", "url": "postgres://gantry:secret@db.invalid:5432/gantry"},
		"pools":          []any{pool},
		"ingress":        map[string]any{"enabled": true},
		"serviceMonitor": map[string]any{"enabled": true},
	})
	if t.Failed() {
		return
	}
	// What is there is what was rendered.
	if _, err := c.Client.AppsV1().Deployments(ns).Get(ctx, "gantry", metav1.GetOptions{}); err != nil {
		t.Errorf("the chart's Deployment: %v", err)
	}

	kubeconfig := c.ServiceAccountKubeconfig(t, ns, "gantry")
	sa := saClient(t, kubeconfig)
	for what, err := range map[string]error{
		"list secrets in its namespace": func() error { _, err := sa.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); return err }(),
		"read the store's Secret": func() error {
			_, err := sa.CoreV1().Secrets(ns).Get(ctx, "gantry-store", metav1.GetOptions{})
			return err
		}(),
		"list pods in default": func() error { _, err := sa.CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); return err }(),
		"list nodes":           func() error { _, err := sa.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); return err }(),
		"get a pod":            func() error { _, err := sa.CoreV1().Pods(ns).Get(ctx, "any", metav1.GetOptions{}); return err }(),
	} {
		if !apierrors.IsForbidden(err) {
			t.Errorf("the chart's account may %s: %v; want Forbidden", what, err)
		}
	}
	checkAccess(t, c, ns, "gantry", []access{
		{"create", "pods", "", ns, true}, {"delete", "pods", "", ns, true}, {"list", "pods", "", ns, true},
		{"watch", "pods", "", ns, true}, {"get", "pods", "log", ns, true},
		{"get", "pods", "", ns, false}, {"update", "pods", "", ns, false}, {"patch", "pods", "", ns, false},
		{"deletecollection", "pods", "", ns, false}, {"create", "pods", "exec", ns, false},
		{"get", "secrets", "", ns, false}, {"list", "secrets", "", ns, false}, {"create", "secrets", "", ns, false},
		{"update", "secrets", "", ns, false}, {"get", "configmaps", "", ns, false},
		{"list", "pods", "", "default", false}, {"create", "pods", "", "default", false}, {"list", "pods", "", "", false},
		{"list", "nodes", "", "", false}, {"watch", "nodes", "", "", false},
		{"get", "persistentvolumeclaims", "", ns, true}, {"create", "persistentvolumeclaims", "", ns, true},
		{"patch", "persistentvolumeclaims", "", ns, true}, {"delete", "persistentvolumeclaims", "", ns, true},
		{"update", "persistentvolumeclaims", "", ns, false}, {"create", "persistentvolumeclaims", "", "default", false},
		{"list", "events", "", ns, true}, {"create", "events", "", ns, false}, {"list", "persistentvolumes", "", "", false},
	})

	// Gantry with the chart's gantry.yaml; only what ties it to this machine changes.
	var cm corev1.ConfigMap
	for _, m := range ms {
		if m.Kind == "ConfigMap" {
			if err := yaml.Unmarshal([]byte(m.YAML), &cm); err != nil {
				t.Fatal(err)
			}
		}
	}
	path := filepath.Join(t.TempDir(), "gantry.yaml")
	if err := os.WriteFile(path, []byte(cm.Data["gantry.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := server.LoadConfig(path)
	if err != nil {
		t.Fatalf("Gantry refuses the chart's gantry.yaml: %v\n%s", err, cm.Data["gantry.yaml"])
	}
	if len(cfg.Pools) != 1 || cfg.Pools[0].Kubernetes == nil || cfg.Pools[0].Kubernetes.Capacity != kube.CapacityCount ||
		cfg.Pools[0].Kubernetes.Namespace != ns {
		t.Fatalf("the chart's pools = %+v; want one kubernetes pool in %s with capacity count", cfg.Pools, ns)
	}
	// Here the pool reaches the API server with the account's token (in a pod, the mounted
	// one), and the test kubelet's workers reach Gantry on loopback, not at the Service.
	cfg.Listen, cfg.Data, cfg.PublicURL = "", "", ""
	cfg.Pools[0].Kubernetes.Kubeconfig, cfg.Pools[0].Kubernetes.WorkerURL = kubeconfig, ""
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // after the server's shutdown, which deletes its pods as the account
		testkit.EventuallyWithin(t, wait, "the chart Gantry's pods gone after it stopped", func() bool {
			pods, err := c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: kube.LabelInstallation + "=gantry"})
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
	call(t, "POST", s.URL()+"/v2/"+ep.ID+"/runsync?wait=60000", key, `{"input":{"prompt":"through the chart's account"}}`, http.StatusOK, &job)
	for deadline := time.Now().Add(wait); (job.Status == "IN_QUEUE" || job.Status == "IN_PROGRESS") && time.Now().Before(deadline); {
		time.Sleep(time.Second) // within the key's rate limit
		call(t, "GET", s.URL()+"/v2/"+ep.ID+"/status/"+job.ID, key, "", http.StatusOK, &job)
	}
	if job.Status != "COMPLETED" || job.Output["prompt"] != "through the chart's account" {
		t.Fatalf("job = %+v; want COMPLETED with the input echoed", job)
	}
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelEndpoint + "=" + ep.ID})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of the endpoint in %s: %v, %v; want one", ns, pods, err)
	}
	pod := pods.Items[0]
	if !strings.HasPrefix(pod.Spec.NodeName, "chart-") {
		t.Errorf("pod on node %q; want the chart group's node, bound by the scheduler", pod.Spec.NodeName)
	}
	// pods/log, as the account.
	req, err := http.NewRequest("GET", fmt.Sprintf("%s/v2/serverless/%s/workers/%s/logs", s.URL(), ep.ID, pod.Labels[kube.LabelWorker]), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	got, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got.Body.Close()
	if got.StatusCode != http.StatusOK {
		t.Errorf("the worker's logs through Gantry (pods/log as the account): %s; want 200", got.Status)
	}

	// The options: the pools' capacity from the nodes, and registries' pull secrets.
	const wide = "gantry-wide"
	install(t, c, chart.Release{Name: "gantry", Namespace: wide}, map[string]any{
		"rbac": map[string]any{"clusterCapacity": true, "registrySecrets": true}})
	checkAccess(t, c, wide, "gantry", []access{
		{"list", "nodes", "", "", true}, {"watch", "nodes", "", "", true}, {"list", "pods", "", "", true},
		{"watch", "pods", "", "", true}, {"get", "nodes", "", "", false}, {"create", "pods", "", "default", false},
		{"create", "secrets", "", wide, true}, {"update", "secrets", "", wide, true}, {"get", "secrets", "", wide, false},
		{"list", "secrets", "", wide, false}, {"create", "secrets", "", "default", false},
	})
	wideClient := saClient(t, c.ServiceAccountKubeconfig(t, wide, "gantry"))
	start, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	p, err := kube.New(start, kube.Config{Pool: core.PoolInfo{ID: "wide", GPUType: "NVIDIA H100 80GB HBM3", GPUs: 99}, Client: wideClient,
		Namespace: wide, NodeSelector: map[string]string{groupLabel: "chart"}, Capacity: kube.CapacityNodes})
	if err != nil {
		t.Fatalf("a pool reading capacity from the nodes as the clusterCapacity account: %v", err)
	}
	defer p.Close()
	testkit.EventuallyWithin(t, wait, "the nodes' capacity as the clusterCapacity account", func() bool { return p.Capacity() <= 2 })
}
