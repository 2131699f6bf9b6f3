package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gantryhq/gantry/server"
)

// lockedBuffer is a bytes.Buffer a process writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startLogged is startServe keeping the server's log (stderr) for the test to read.
func startLogged(t *testing.T, bin string, args ...string) (*started, *lockedBuffer) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	log := &lockedBuffer{}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &started{cmd: cmd, done: make(chan error, 1)}
	t.Cleanup(func() { cmd.Process.Kill() })
	lines := bufio.NewScanner(stdout)
	deadline := time.AfterFunc(30*time.Second, func() { cmd.Process.Kill() })
	for lines.Scan() {
		if m := listenRE.FindStringSubmatch(lines.Text()); m != nil {
			s.base = m[1]
			break
		}
	}
	deadline.Stop()
	if s.base == "" {
		t.Fatalf("gantry serve printed no address; log:\n%s", log)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout); s.done <- cmd.Wait() }()
	return s, log
}

// submitter posts /run jobs until stopped, keeping the ids of those acknowledged (200): a
// refused or failed request is not acknowledged, and so promises nothing.
type submitter struct {
	mu    sync.Mutex
	acked []string
}

func (sb *submitter) run(url, key, input string) bool {
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{"input":`+input+`}`))
	req.Header.Set("Authorization", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var j jobView
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&j) != nil || j.ID == "" {
		return false
	}
	sb.mu.Lock()
	sb.acked = append(sb.acked, j.ID)
	sb.mu.Unlock()
	return true
}

func (sb *submitter) ids() []string {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return append([]string(nil), sb.acked...)
}

// TestGracefulStopMidBurst stops `gantry serve` with SIGTERM the way it crashed (exit status 2,
// "pebble: closed"): mid-burst, while echo worker processes hold slow jobs, round after round
// on one data directory. Every stop must exit 0 with no panic in the log; after the last, one
// more start completes every acknowledged job with retries 0, the slow jobs that ran across
// every restart included (they used to end FAILED, "lost 4 times").
func TestGracefulStopMidBurst(t *testing.T) {
	t.Parallel()
	bin := buildGantry(t)
	data := t.TempDir()
	args := []string{"--data", data, "--shutdown-grace", "300ms", "--quota-minute", "0", "--quota-hour", "0", "--quota-day", "0"}
	key := newKey(t, bin, data)
	var ep string
	sb := &submitter{}
	var slow []string
	const rounds = 5
	t0 := time.Now()
	for round := range rounds {
		s, log := startLogged(t, bin, args...)
		if round == 0 {
			code, body := call(t, "POST", s.base+"/v2/serverless", key,
				`{"name":"echo","type":"QUEUE","templateId":"gantry-echo","env":{"GANTRY_CONCURRENCY":"3"},"gpu":{"pools":["local"]},
				  "workers":{"min":2,"max":2},"scaling":{"type":"QUEUE_DELAY","queueDelay":4}}`)
			if code != 201 {
				t.Fatalf("create endpoint = %d %s", code, body)
			}
			var v struct{ ID string }
			_ = json.Unmarshal([]byte(body), &v)
			ep = v.ID
			// Slow jobs, queued first each round: taken in every round, and stopped in every one.
			for range 2 {
				if !sb.run(s.base+"/v2/"+ep+"/run", key, `{"sleep_ms":60000}`) {
					t.Fatal("submitting a slow job failed")
				}
			}
			slow = sb.ids()
		}
		// The burst: quick jobs, posted until the server stops answering.
		stop := make(chan struct{})
		var burst sync.WaitGroup
		burst.Go(func() {
			pace := time.NewTicker(20 * time.Millisecond) // about 50 jobs a second: a burst the workers keep up with
			defer pace.Stop()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-pace.C:
				}
				sb.run(s.base+"/v2/"+ep+"/run", key, fmt.Sprintf(`{"sleep_ms":%d,"n":%d}`, 20+i%4*20, i))
			}
		})
		// Workers hold jobs (the slow ones at least) before the signal.
		waitHealth(t, s.base+"/v2/"+ep+"/health", key, func(h healthView) bool { return h.Workers.Running >= 2 })
		t.Logf("round %d: workers hold jobs at %v", round, time.Since(t0))
		if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		var err error
		select {
		case err = <-s.done:
		case <-time.After(45 * time.Second):
			t.Fatalf("round %d: gantry serve did not exit within 45 s of SIGTERM; log:\n%s", round, log)
		}
		t.Logf("round %d: exited at %v", round, time.Since(t0))
		close(stop)
		burst.Wait()
		out := log.String()
		if err != nil || strings.Contains(out, "panic") || strings.Contains(out, "fatal error") {
			t.Fatalf("round %d: gantry serve exited with %v after SIGTERM mid-burst; want exit status 0 and no panic; log:\n%s", round, err, out)
		}
		if !regexp.MustCompile(`jobs still running are back in the queue.* jobs=\d+`).MatchString(out) {
			t.Errorf("round %d: the log does not say the running jobs went back in the queue; log:\n%s", round, out)
		}
	}

	s, log := startLogged(t, bin, args...)
	acked := sb.ids()
	t.Logf("%d jobs acknowledged over %d rounds", len(acked), rounds)
	for _, id := range slow { // they need not finish: their retries must be untouched
		code, j := jobCall(t, "GET", s.base+"/v2/"+ep+"/status/"+id, key, "")
		if code != 200 || (j.Status != "IN_QUEUE" && j.Status != "IN_PROGRESS") || j.Retries != 0 {
			t.Errorf("slow job %s after %d stops = %d %+v; want IN_QUEUE or IN_PROGRESS with retries 0", id, rounds, code, j)
		}
		if code, j := jobCall(t, "POST", s.base+"/v2/"+ep+"/cancel/"+id, key, ""); code != 200 {
			t.Errorf("cancel of slow job %s = %d %+v", id, code, j)
		}
	}
	for _, id := range acked[len(slow):] {
		if j := waitStatus(t, s.base+"/v2/"+ep+"/status/"+id, key, "COMPLETED"); j.Retries != 0 {
			t.Errorf("job %s completed with retries %d; want 0 (a graceful stop spends no retry)", id, j.Retries)
		}
	}
	s.stop(t)
	if out := log.String(); strings.Contains(out, "panic") {
		t.Errorf("the last stop's log has a panic:\n%s", out)
	}
}

// TestShutdownGraceSetting: --shutdown-grace and shutdownGrace set the grace (the flag wins),
// the default is 30 s, and a negative or malformed one is refused, naming the setting.
func TestShutdownGraceSetting(t *testing.T) {
	t.Parallel()
	var help bytes.Buffer
	_ = run([]string{"serve", "--help"}, io.Discard, &help)
	for _, want := range []string{"-shutdown-grace", "(default 30s)", "shutdownGrace: 30s"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("serve --help lacks %q:\n%s", want, help.String())
		}
	}
	for i, tc := range []struct {
		file string // config file body; "" = no config file
		flag string // --shutdown-grace; "" = not given
		want time.Duration
		err  string // a refusal containing this; "" = accepted
	}{
		{want: server.DefaultShutdownGrace},
		{file: "shutdownGrace: 2m\n", want: 2 * time.Minute},
		{file: "shutdownGrace: 0s\n", want: 0},
		{file: "shutdownGrace: 2m\n", flag: "5s", want: 5 * time.Second},
		{flag: "0", want: 0},
		{file: "shutdownGrace: -1s\n", err: "shutdownGrace -1s must not be negative"},
		{flag: "-1s", err: `invalid value "-1s" for flag -shutdown-grace: -1s must not be negative`},
		{flag: "soon", err: `invalid value "soon" for flag -shutdown-grace`},
	} {
		path := ""
		if tc.file != "" {
			path = filepath.Join(t.TempDir(), fmt.Sprintf("c%d.yaml", i))
			if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if tc.err != "" { // refused before serve starts anything
			args := []string{"serve", "--data", t.TempDir()}
			if path != "" {
				args = append(args, "--config", path)
			}
			if tc.flag != "" {
				args = append(args, "--shutdown-grace", tc.flag)
			}
			var stderr bytes.Buffer
			if err := run(args, io.Discard, &stderr); err == nil || !strings.Contains(err.Error()+stderr.String(), tc.err) {
				t.Errorf("gantry %v = %v (stderr %q); want a refusal with %q", args, err, stderr.String(), tc.err)
			}
			continue
		}
		cfg, err := server.LoadConfig(path)
		if err != nil {
			t.Fatalf("config %q: %v", tc.file, err)
		}
		var flagVal optDuration
		if tc.flag != "" {
			if err := flagVal.Set(tc.flag); err != nil {
				t.Fatalf("--shutdown-grace %s: %v", tc.flag, err)
			}
		}
		cfg.ShutdownGrace = flagVal.or(cfg.ShutdownGrace)
		if got := cfg.Grace(); got != tc.want {
			t.Errorf("config %q, flag %q: grace %v; want %v", tc.file, tc.flag, got, tc.want)
		}
	}
}
