package gcfloor_test

import (
	"os"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/gcfloor"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, floor int64
		base, want  int
	}{
		{4 * mib, 64 * mib, 100, 1500},  // grows to 64 MiB: 60 MiB on 4 live
		{16 * mib, 64 * mib, 100, 300},  // 48 on 16
		{32 * mib, 64 * mib, 100, 100},  // half the floor: GOGC alone
		{500 * mib, 64 * mib, 100, 100}, // a large heap: unchanged
		{0, 64 * mib, 100, 6300},        // under 1 MiB counts as 1 MiB
		{40 * mib, 96 * mib, 200, 200},  // never below GOGC
		{4 * mib, 64 * mib, -1, -1},     // GC off stays off
		{10 * mib, 64 * mib, 100, 540},  // 54 on 10
		{31 * mib, 64 * mib, 100, 106},  // just under half
		{1 * mib, 64 * mib, 1000, 6300}, // above a raised GOGC
		{1 * mib, 4 * mib, 1000, 1000},  // a raised GOGC above the floor's need
	} {
		if got := gcfloor.Percent(c.live, c.floor, c.base); got != c.want {
			t.Errorf("Percent(%d MiB, %d MiB, %d) = %d; want %d", c.live/mib, c.floor/mib, c.base, got, c.want)
		}
	}
}

// TestStartRaisesAndStopRestores: after a collection of a small heap the GC percentage is
// raised, and stop puts it back.
func TestStartRaisesAndStopRestores(t *testing.T) {
	if os.Getenv("GOGC") != "" {
		t.Skip("GOGC is set: Start leaves the collector to it")
	}
	stop := gcfloor.Start(256 << 20)
	deadline := time.Now().Add(5 * time.Second)
	for gogc() <= 100 {
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("GC percentage = %d after collections; want it raised", gogc())
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond) // the finalizer runs on its own goroutine
	}
	stop()
	if got := gogc(); got != 100 {
		t.Errorf("GC percentage after stop = %d; want 100", got)
	}
}

func gogc() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}
