package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// cpuSample is the machine's CPU time and this process tree's, in clock ticks, so that a
// scenario can report how much CPU other processes took while it ran (the figures are only as
// good as the machine was quiet).
type cpuSample struct {
	at         time.Time
	busy, ours uint64
	// irq is the busy time spent in interrupts and softirqs (included in busy). The kernel's
	// network processing (loopback traffic included) runs as softirq on whatever CPU and
	// process it interrupts, and /proc charges it to no process: under a network load it is
	// mostly the load's own, not another process's.
	irq uint64
}

// clockTicks is USER_HZ, 100 on every Linux this runs on.
const clockTicks = 100

// sampleCPU reads /proc/stat and /proc/self/stat. ours counts this process and the children it
// has waited for (wrk, the servers once stopped, and through them gantry's worker processes).
func sampleCPU() cpuSample {
	s := cpuSample{at: time.Now()}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		// cpu user nice system idle iowait irq softirq steal ...
		for i, v := range f[1:] {
			n, _ := strconv.ParseUint(v, 10, 64)
			if i != 3 && i != 4 && i < 8 {
				s.busy += n
			}
			if i == 5 || i == 6 {
				s.irq += n
			}
		}
	}
	if b, err := os.ReadFile("/proc/self/stat"); err == nil {
		str := string(b)
		f := strings.Fields(str[strings.LastIndexByte(str, ')')+1:])
		// f[0] is field 3 (state); utime, stime, cutime, cstime are fields 14..17.
		for _, v := range f[11:15] {
			n, _ := strconv.ParseUint(v, 10, 64)
			s.ours += n
		}
	}
	return s
}

// otherCPU describes the CPU other processes used between two samples. Interrupt and softirq
// time is counted apart, as neither ours nor theirs: it is mostly the network processing of
// the scenario's own loopback traffic, which /proc charges to no process.
func otherCPU(a, b cpuSample, cpus int) (note string, share float64) {
	wall := b.at.Sub(a.at).Seconds()
	busy := float64(b.busy-a.busy) / clockTicks
	ours := float64(b.ours-a.ours) / clockTicks
	irq := float64(b.irq-a.irq) / clockTicks
	other := max(busy-ours-irq, 0)
	share = other / (wall * float64(cpus))
	return fmt.Sprintf("Machine load while this scenario ran (%.0f s): this benchmark and its children used %.1f CPU-s, other processes %.1f CPU-s (%.1f%% of the %d CPUs); "+
		"interrupts and softirqs, which /proc charges to no process (mostly the kernel's network processing of this scenario's loopback traffic), %.1f CPU-s (%.1f%%).",
		wall, ours, other, 100*share, cpus, irq, 100*irq/(wall*float64(cpus))), share
}
