package kit

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/gantryhq/gantry/core"
)

// CheckPool checks what every adapter's config shares: the pool's description, which it
// completes (the adapter's name by default, CUDA versions sorted), the machine names of its
// devices (one per device, or none) and the stop grace. It returns the completed description
// and each problem found.
func CheckPool(d core.PoolInfo, adapter string, devices []string, stopGrace time.Duration) (core.PoolInfo, []error) {
	d.Adapter = cmp.Or(d.Adapter, adapter)
	var errs []error
	if d.ID == "" || d.GPUType == "" {
		errs = append(errs, errors.New("the pool needs an ID and a GPUType"))
	}
	if d.Adapter != adapter {
		errs = append(errs, fmt.Errorf("adapter %q; want %s", d.Adapter, adapter))
	}
	if d.GPUs <= 0 || d.PerWorker < 0 {
		errs = append(errs, fmt.Errorf("count %d, maxGpusPerWorker %d: want count > 0 and maxGpusPerWorker >= 0", d.GPUs, d.PerWorker))
	}
	cuda, err := core.SortCUDAVersions(d.CUDAVersions)
	if err != nil {
		errs = append(errs, err)
	}
	d.CUDAVersions = cuda
	if devices != nil && len(devices) != d.GPUs {
		errs = append(errs, fmt.Errorf("%d device names for %d GPUs", len(devices), d.GPUs))
	}
	if stopGrace < 0 {
		errs = append(errs, fmt.Errorf("stop grace %v is negative", stopGrace))
	}
	return d, errs
}
