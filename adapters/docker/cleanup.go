package docker

import (
	"context"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// cleanup removes the containers of this pool that an earlier run of Gantry left on the host
// (labelled LabelManaged and LabelPool with the pool's id), saving each one's log first when
// the pool has a log directory. They cannot be adopted: their workers' tokens died with the
// server that started them. Each removal is logged.
func (p *Pool) cleanup(ctx context.Context) error {
	filters := make(client.Filters).Add("label", LabelManaged+"=true", LabelPool+"="+p.desc.ID)
	list, err := engineCall(ctx, p, kindInspect, "ContainerList", func(ctx context.Context) (client.ContainerListResult, error) {
		return p.api.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: filters})
	})
	if err != nil {
		return err
	}
	for _, c := range list.Items {
		worker := c.Labels[LabelWorker]
		if validID(worker) {
			if err := p.saveLogOf(ctx, worker, c.ID); err != nil {
				p.log.Warn("saving the log of a leftover container", "pool", p.desc.ID, "worker", worker, "err", err)
			}
		}
		if err := p.removeContainer(ctx, c.ID); err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("container %s (worker %s): %w", c.ID[:min(12, len(c.ID))], worker, err)
		}
		p.log.Info("removed a worker container an earlier run left", "pool", p.desc.ID, "container", c.ID[:min(12, len(c.ID))],
			"names", c.Names, "worker", worker, "endpoint", c.Labels[LabelEndpoint], "state", c.State)
	}
	return nil
}
