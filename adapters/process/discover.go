// Package process is the pool adapter that runs workers as local processes: the embedded
// default. Its pool reports the machine's real GPUs, found with nvidia-smi, or CPU slots when
// there are none.
package process

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/gantryhq/gantry/core"
)

// GPU is one GPU as nvidia-smi reports it.
type GPU struct {
	Index    int
	Name     string
	MemoryMB int
	UUID     string
}

// Inventory is what discovery found: the GPUs and the driver's CUDA version ("12.4"), or
// nothing.
type Inventory struct {
	GPUs        []GPU
	DriverCUDA  string
	Description string // how the inventory was found, for the startup log
}

// QueryArgs are the nvidia-smi arguments whose CSV output ParseGPUs reads.
var QueryArgs = []string{"--query-gpu=index,name,memory.total,uuid", "--format=csv,noheader,nounits"}

// Discover asks nvidia-smi for the machine's GPUs. No nvidia-smi, or one that fails, means no
// GPUs: the local pool then offers CPU slots.
func Discover(ctx context.Context) Inventory {
	path, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return Inventory{Description: "no nvidia-smi on PATH: offering CPU slots"}
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	csv, err := exec.CommandContext(ctx, path, QueryArgs...).Output()
	if err != nil {
		return Inventory{Description: fmt.Sprintf("nvidia-smi failed (%v): offering CPU slots", err)}
	}
	gpus, err := ParseGPUs(string(csv))
	if err != nil || len(gpus) == 0 {
		return Inventory{Description: fmt.Sprintf("nvidia-smi listed no usable GPU (%v): offering CPU slots", err)}
	}
	banner, _ := exec.CommandContext(ctx, path).Output()
	return Inventory{GPUs: gpus, DriverCUDA: ParseDriverCUDA(string(banner)),
		Description: fmt.Sprintf("nvidia-smi found %d GPU(s)", len(gpus))}
}

// ParseGPUs reads `nvidia-smi --query-gpu=index,name,memory.total,uuid --format=csv,noheader,nounits`.
func ParseGPUs(csv string) ([]GPU, error) {
	var gpus []GPU
	err := csvRows(csv, 4, func(line string, f []string) error {
		idx, err1 := strconv.Atoi(f[0])
		mem, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil {
			return fmt.Errorf("nvidia-smi line %q: index or memory is not a number", line)
		}
		gpus = append(gpus, GPU{Index: idx, Name: f[1], MemoryMB: mem, UUID: f[3]})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return gpus, nil
}

// csvRows calls row with each non-blank line of nvidia-smi's CSV output (noheader) and its n
// fields, trimmed; a line with another number of fields is an error.
func csvRows(csv string, n int, row func(line string, fields []string) error) error {
	sc := bufio.NewScanner(strings.NewReader(csv))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) != n {
			return fmt.Errorf("nvidia-smi line %q: want %d fields, got %d", line, n, len(f))
		}
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		if err := row(line, f); err != nil {
			return err
		}
	}
	return sc.Err()
}

var cudaBannerRE = regexp.MustCompile(`CUDA Version:\s*(\d+)\.(\d+)`)

// ParseDriverCUDA finds "CUDA Version: X.Y" in nvidia-smi's banner; "" when absent.
func ParseDriverCUDA(banner string) string {
	m := cudaBannerRE.FindStringSubmatch(banner)
	if m == nil {
		return ""
	}
	return m[1] + "." + m[2]
}

// CUDAVersions lists the CUDA versions a driver supporting `driver` can run: every release
// from 11.0 up to it (a driver runs images built for its own version or older).
func CUDAVersions(driver string) []string {
	maj, min, ok := strings.Cut(driver, ".")
	dMaj, err1 := strconv.Atoi(maj)
	dMin, err2 := strconv.Atoi(min)
	if !ok || err1 != nil || err2 != nil {
		return nil
	}
	lastMinor := map[int]int{11: 8, 12: 9} // the last minor release of finished majors
	var out []string
	for m := 11; m <= dMaj; m++ {
		top := 9 // a major still in progress: assume minors up to .9
		if last, ok := lastMinor[m]; ok {
			top = last
		}
		if m == dMaj {
			top = dMin
		}
		for n := 0; n <= top; n++ {
			out = append(out, fmt.Sprintf("%d.%d", m, n))
		}
	}
	return out
}

// LocalPools turns an inventory into the local pool(s): one per GPU type ("local", then
// "local-2", ...), or one pool of CPU slots named "local".
func LocalPools(inv Inventory) []core.PoolInfo {
	if len(inv.GPUs) == 0 {
		n := runtime.NumCPU()
		return []core.PoolInfo{{
			ID: "local", Adapter: "process", GPUType: "CPU", DisplayName: "CPU slot (no GPU found)",
			GPUs: n * CPUSlotsPerVCPU, PerWorker: 1, DataCenter: "LOCAL", CPU: true, VCPUs: n, MemoryPerCPU: memoryPerCPU(n),
		}}
	}
	var pools []core.PoolInfo
	for _, g := range inv.GPUs {
		i := indexOfType(pools, g.Name)
		if i < 0 {
			id := "local"
			if len(pools) > 0 {
				id = fmt.Sprintf("local-%d", len(pools)+1)
			}
			pools = append(pools, core.PoolInfo{
				ID: id, Adapter: "process", GPUType: g.Name, DisplayName: g.Name,
				MemoryGB: (g.MemoryMB + 512) / 1024, CUDAVersions: CUDAVersions(inv.DriverCUDA), DataCenter: "LOCAL",
			})
			i = len(pools) - 1
		}
		pools[i].GPUs++
	}
	return pools
}

// CPUSlotsPerVCPU is how many workers the CPU pool of a machine without GPUs runs per vCPU:
// workers mostly wait on HTTP (the built-in ones do), so a core is shared by several.
const CPUSlotsPerVCPU = 8

// LocalDevices names the GPUs behind each pool LocalPools makes, by pool id: the UUIDs
// nvidia-smi reported (their indices where it gave none), in the pools' device order.
func LocalDevices(inv Inventory) map[string][]string {
	pools := LocalPools(inv)
	out := map[string][]string{}
	for _, g := range inv.GPUs {
		p := pools[indexOfType(pools, g.Name)]
		out[p.ID] = append(out[p.ID], cmp.Or(g.UUID, strconv.Itoa(g.Index)))
	}
	return out
}

func indexOfType(pools []core.PoolInfo, name string) int {
	for i, p := range pools {
		if p.GPUType == name {
			return i
		}
	}
	return -1
}

// memoryPerCPU reads /proc/meminfo; 1 GB per vCPU where it cannot.
func memoryPerCPU(cpus int) int {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 1
	}
	var kb int
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "MemTotal:") {
			kb, _ = strconv.Atoi(strings.Fields(line)[1])
		}
	}
	return max(kb/1024/1024/cpus, 1)
}
