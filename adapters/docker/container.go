package docker

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/authconfig"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/registry"
	"github.com/moby/moby/client"

	"github.com/gantryhq/gantry/pool"
)

// logOptions bound a container's log in the engine: json-file, at most 3 files of 10 MB.
var logOptions = container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "10m", "max-file": "3"}}

// idRE is what a worker id may be: safe in a container name and a file name.
var idRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// validID reports whether a worker id may name a container and a log file.
func validID(id string) bool { return idRE.MatchString(id) }

// nameUnsafe matches what Docker does not allow in a container name.
var nameUnsafe = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// containerName is the name of a worker's container: gantry-<pool>-<worker>, with what a name
// may not hold replaced by '-'.
func containerName(pl, worker string) string {
	return "gantry-" + nameUnsafe.ReplaceAllString(pl, "-") + "-" + worker
}

// createOptions builds a worker's container: the image's entrypoint with the spec's args
// (split at spaces) as its command; the spec's env with the port variables (portEnv) and the
// device variables over it; the pool's labels; host networking; the devices as a device
// request of the "nvidia" driver (or NVIDIA_VISIBLE_DEVICES with GPUsByEnv); the disk size
// with DiskQuota; the engine's init with Init; a bounded json-file log.
func (p *Pool) createOptions(spec pool.WorkerSpec, name string, portEnv map[string]string) client.ContainerCreateOptions {
	env := maps.Clone(spec.Env)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, portEnv)
	host := &container.HostConfig{NetworkMode: "host", LogConfig: logOptions}
	if !p.desc.CPU {
		names := make([]string, len(spec.GPUs))
		for i, g := range spec.GPUs {
			names[i] = strconv.Itoa(g)
			if p.devices != nil {
				names[i] = p.devices[g]
			}
		}
		switch {
		case len(names) == 0:
			env["NVIDIA_VISIBLE_DEVICES"] = "void" // no GPU, even under a default nvidia runtime
		case p.cfg.GPUsByEnv:
			env["NVIDIA_VISIBLE_DEVICES"] = strings.Join(names, ",")
		default:
			// The runtime sets NVIDIA_VISIBLE_DEVICES; the container sees its GPUs as 0..n-1.
			delete(env, "NVIDIA_VISIBLE_DEVICES")
			host.DeviceRequests = []container.DeviceRequest{{Driver: "nvidia", DeviceIDs: names, Capabilities: [][]string{{"gpu"}}}}
		}
	}
	if p.cfg.DiskQuota && spec.Disk > 0 {
		host.StorageOpt = map[string]string{"size": strconv.Itoa(spec.Disk) + "G"}
	}
	if p.cfg.Init {
		init := true
		host.Init = &init
	}
	var vars []string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		vars = append(vars, k+"="+env[k])
	}
	cfg := &container.Config{
		Image: spec.Image,
		Env:   vars,
		Labels: map[string]string{
			LabelManaged:  "true",
			LabelPool:     p.desc.ID,
			LabelWorker:   spec.ID,
			LabelEndpoint: spec.Endpoint,
		},
	}
	if args := strings.Fields(spec.Args); len(args) > 0 {
		cfg.Cmd = args
	}
	return client.ContainerCreateOptions{Name: name, Config: cfg, HostConfig: host}
}

// ensureImage makes sure the host has image, pulling it with the endpoint's registry
// credential when it lacks it (unless the pool never pulls).
func (p *Pool) ensureImage(ctx context.Context, image, endpoint, registryID string) error {
	_, err := engineCall(ctx, p, kindInspect, "ImageInspect", func(ctx context.Context) (client.ImageInspectResult, error) {
		return p.api.ImageInspect(ctx, image)
	})
	if err == nil {
		return nil
	}
	if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("looking for image %q on the Docker host: %w", image, err)
	}
	if p.pull == PullNever {
		return fmt.Errorf("image %q is not on this Docker host, and the pool does not pull images (pull: never)", image)
	}
	auth, err := p.registryAuth(ctx, endpoint, registryID)
	if err != nil {
		return fmt.Errorf("image %q is not on this Docker host and could not be pulled: %w", image, err)
	}
	pctx, cancel, timedOut := p.bound(ctx, kindPull, "ImagePull")
	defer cancel()
	resp, err := p.api.ImagePull(pctx, image, client.ImagePullOptions{RegistryAuth: auth})
	if err == nil {
		err = resp.Wait(pctx) // the pull's own errors come in its stream
	}
	if err = timedOut(err); err != nil {
		return fmt.Errorf("image %q is not on this Docker host and could not be pulled: %w", image, err)
	}
	return nil
}

// registryAuth is the X-Registry-Auth value for pulling an endpoint's image: the registry
// credential id names, encoded; "" when it names none.
func (p *Pool) registryAuth(ctx context.Context, endpoint, id string) (string, error) {
	if id == "" {
		return "", nil
	}
	if p.cfg.Credentials == nil {
		return "", fmt.Errorf("endpoint %s names registry credential %q, but no registries are configured", endpoint, id)
	}
	cred, err := p.cfg.Credentials(ctx, id)
	if err != nil {
		return "", fmt.Errorf("registry credential %q of endpoint %s: %w", id, endpoint, err)
	}
	return authconfig.Encode(registry.AuthConfig{Username: cred.Username, Password: cred.Password, ServerAddress: cred.ServerAddress})
}
