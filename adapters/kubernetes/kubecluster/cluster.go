// Package kubecluster starts a real Kubernetes control plane inside a Go test process: a
// kube-apiserver on embedded etcd and the real kube-scheduler, both on 127.0.0.1, plus a test
// kubelet (kubelet.go) that owns fake GPU nodes and runs each pod bound to them as a local
// process with the pod's environment. Nothing is downloaded: the servers are built from
// k8s.io/kubernetes at a pinned release.
//
// It lives in its own Go module because k8s.io/kubernetes can only be depended on with one
// replace directive per staging module (kubernetes#79384); the main module stays clean.
package kubecluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/storage/etcd3/testserver"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/tools/events"
	kubeapiserver "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	"k8s.io/kubernetes/pkg/scheduler"
	"k8s.io/kubernetes/pkg/scheduler/profile"
)

// Cluster is a running control plane: an API server and a scheduler.
type Cluster struct {
	// Config reaches the API server as its loopback administrator. Copy it before changing it.
	Config *rest.Config
	// Client is the test's own client (high QPS; not the one under test).
	Client kubernetes.Interface
}

// Start starts etcd, kube-apiserver and kube-scheduler and stops them when the test ends. The
// servers mutate process globals (feature gates, the component registry), so start one
// cluster at a time per process, never from parallel tests.
func Start(t testing.TB) *Cluster {
	t.Helper()
	etcdCfg := testserver.NewTestConfig(t)
	etcdClient := testserver.RunEtcd(t, etcdCfg)
	storage := storagebackend.NewDefaultConfig("/registry", nil)
	storage.Transport.ServerList = etcdClient.Endpoints()
	// No service-account controller runs: worker pods do not mount a token, and the
	// ServiceAccount admission plugin would refuse pods whose account does not exist yet.
	// Authorization is RBAC, as in a real cluster: the test's own clients are the loopback
	// administrator (system:masters), and a service account's token (ServiceAccountToken)
	// gets what its Roles grant.
	srv, err := kubeapiserver.StartTestServer(t, kubeapiserver.NewDefaultTestServerOptions(),
		[]string{"--disable-admission-plugins=ServiceAccount", "--bind-address=127.0.0.1", "--authorization-mode=RBAC"}, storage)
	if err != nil {
		t.Fatalf("starting kube-apiserver: %v", err)
	}
	t.Cleanup(srv.TearDownFn)
	cfg := rest.CopyConfig(srv.ClientConfig)
	client := kubernetes.NewForConfigOrDie(cfg)

	ctx, cancel := context.WithCancel(context.Background())
	factory := scheduler.NewInformerFactory(client, 0, nil)
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	sched, err := scheduler.New(ctx, client, factory, nil, profile.NewRecorderFactory(broadcaster),
		scheduler.WithKubeConfig(cfg))
	if err != nil {
		cancel()
		t.Fatalf("creating kube-scheduler: %v", err)
	}
	broadcaster.StartRecordingToSink(ctx.Done())
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	done := make(chan struct{})
	go func() {
		defer close(done)
		sched.Run(ctx)
	}()
	t.Cleanup(func() { // before the API server's teardown (cleanups run last first)
		cancel()
		<-done
		factory.Shutdown()
		broadcaster.Shutdown()
	})
	return &Cluster{Config: cfg, Client: client}
}

// Kubeconfig writes a kubeconfig file reaching the cluster as its administrator into a
// temporary directory of the test and returns its path: what an operator hands Gantry.
func (c *Cluster) Kubeconfig(t testing.TB) string {
	t.Helper()
	return c.writeKubeconfig(t, &clientcmdapi.AuthInfo{Token: c.Config.BearerToken,
		ClientCertificateData: c.Config.CertData, ClientKeyData: c.Config.KeyData})
}

// ServiceAccountKubeconfig writes a kubeconfig file that authenticates as a service account
// with a token the TokenRequest API issues for it (an hour's), as the token a pod of that
// account mounts, and returns its path.
func (c *Cluster) ServiceAccountKubeconfig(t testing.TB, namespace, name string) string {
	t.Helper()
	tr, err := c.Client.CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token of service account %s/%s: %v", namespace, name, err)
	}
	return c.writeKubeconfig(t, &clientcmdapi.AuthInfo{Token: tr.Status.Token})
}

func (c *Cluster) writeKubeconfig(t testing.TB, user *clientcmdapi.AuthInfo) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthorityData: c.Config.CAData,
		TLSServerName: c.Config.ServerName, InsecureSkipTLSVerify: c.Config.Insecure}
	cfg.AuthInfos["admin"] = user
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "admin"}
	cfg.CurrentContext = "test"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatalf("writing a kubeconfig: %v", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// ClientFor returns a client of the cluster with its own QPS and burst and, when wrap is not
// nil, its transport wrapped (to count requests).
func (c *Cluster) ClientFor(qps float32, burst int, wrap func(http.RoundTripper) http.RoundTripper) (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = qps, burst
	cfg.WrapTransport = wrap
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("a client of the test cluster: %w", err)
	}
	return cs, nil
}
