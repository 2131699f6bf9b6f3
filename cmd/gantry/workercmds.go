package main

import (
	"bufio"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gantryhq/gantry/oas"
)

// This file is `gantry worker list` and `gantry worker logs`: an endpoint's workers over the API.

// workerCmd runs `gantry worker list ENDPOINT` and `gantry worker logs ENDPOINT WORKER [-f]`.
func (a *app) workerCmd(ctx context.Context, args []string) error {
	sub, args, err := a.subcommand("worker", args, "list", "logs")
	if err != nil {
		return err
	}
	usage := "gantry worker list ENDPOINT\n\nLists the endpoint's workers, and the ones that exited lately."
	if sub == "logs" {
		usage = "gantry worker logs ENDPOINT WORKER [-f] [--tail N]\n\nPrints a worker's output; -f follows it until the worker exits."
	}
	fs := a.flagSet("worker "+sub, usage)
	c := a.commonFlags(fs)
	var follow bool
	var tail int
	if sub == "logs" {
		fs.BoolVar(&follow, "f", false, "follow the log until the worker exits")
		fs.IntVar(&tail, "tail", 200, "print the last N lines first (1 to 100000)")
	}
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if sub == "list" {
		err = needArgs(fs, pos, "ENDPOINT")
	} else {
		err = needArgs(fs, pos, "ENDPOINT", "WORKER")
	}
	if err != nil {
		return err
	}
	cn, err := a.connect(c)
	if err != nil {
		return err
	}
	if sub == "list" {
		ws, err := answer[oas.WorkerListHeaders](cn.api.ListWorkers(ctx, oas.ListWorkersParams{EndpointId: pos[0]})).get(cn, "listing workers")
		if err != nil {
			return err
		}
		return cn.out.emit(&ws.Response, func(t *table) {
			t.row("ID", "STATUS", "POOL", "GPUS", "JOBS", "STARTED", "COLD START", "ERROR")
			for _, w := range ws.Response.Items {
				gpus := make([]string, len(w.Gpus))
				for i, g := range w.Gpus {
					gpus[i] = strconv.Itoa(g)
				}
				cold := ""
				if v, ok := w.ColdStartMs.Get(); ok {
					cold = ms(v)
				}
				t.row(w.ID, string(w.Status), w.Pool, strings.Join(gpus, ","), strconv.Itoa(w.Jobs.Or(0)), when(w.StartedAt), cold, w.Error.Or(""))
			}
		})
	}
	return a.logs(ctx, cn, pos[0], pos[1], tail, follow)
}

// logs prints a worker's log; with follow, it asks again each poll interval, prints the lines
// that are new, and returns once the worker has exited (its last lines printed).
func (a *app) logs(ctx context.Context, cn *conn, ep, worker string, tail int, follow bool) error {
	fetch := func(n int) ([]string, error) {
		l, err := answer[oas.GetWorkerLogsOKHeaders](cn.api.GetWorkerLogs(ctx, oas.GetWorkerLogsParams{EndpointId: ep, WorkerId: worker, Tail: oas.NewOptInt(n)})).get(cn, "reading the worker's log")
		if err != nil {
			return nil, err
		}
		var lines []string
		sc := bufio.NewScanner(l.Response.Data)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		return lines, sc.Err()
	}
	printed, err := fetch(tail)
	if err != nil {
		return err
	}
	for _, l := range printed {
		fmt.Fprintln(a.stdout, printable(l))
	}
	if !follow {
		return nil
	}
	poll := cmpOrDuration(a.poll, time.Second)
	const window = 1000 // lines asked for on each poll: the new ones since, and some overlap
	for {
		exited, err := a.workerExited(ctx, cn, ep, worker)
		if err != nil {
			return err
		}
		lines, err := fetch(window)
		if err != nil {
			return err
		}
		fresh := newLines(printed, lines)
		for _, l := range fresh {
			fmt.Fprintln(a.stdout, printable(l))
		}
		printed = append(printed, fresh...)
		if len(printed) > window {
			printed = printed[len(printed)-window:]
		}
		if exited {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}

func cmpOrDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// workerExited reports whether the worker has exited (or is no longer listed).
func (a *app) workerExited(ctx context.Context, cn *conn, ep, worker string) (bool, error) {
	ws, err := answer[oas.WorkerListHeaders](cn.api.ListWorkers(ctx, oas.ListWorkersParams{EndpointId: ep})).get(cn, "listing workers")
	if err != nil {
		return false, err
	}
	i := slices.IndexFunc(ws.Response.Items, func(w oas.WorkerInfo) bool { return w.ID == worker })
	return i < 0 || ws.Response.Items[i].Status == oas.WorkerInfoStatusEXITED, nil
}

// newLines returns the lines of cur (a log's last lines now) after the ones already printed:
// cur's first lines that repeat the end of printed are skipped.
func newLines(printed, cur []string) []string {
	for k := min(len(printed), len(cur)); k > 0; k-- {
		if slices.Equal(printed[len(printed)-k:], cur[:k]) {
			return cur[k:]
		}
	}
	if len(printed) > 0 && len(cur) > 0 && len(cur) < len(printed) {
		return nil // the log is shorter than what was printed and shares no end with it: nothing new
	}
	return cur
}
