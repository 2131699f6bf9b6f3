package main

// The floor's own worker: a minimal RunPod-protocol echo worker that the queue floor starts as
// its worker processes (bench -floor-worker). It is the bench's code, not Gantry's worker
// package (gantry worker echo), so that a change to Gantry's worker does not move the floor.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// floorWorkerFlag makes the bench binary run as one floor worker, configured by the RunPod
// variables the queue floor sets (RUNPOD_WEBHOOK_GET_JOB, RUNPOD_WEBHOOK_POST_OUTPUT).
const floorWorkerFlag = "-floor-worker"

// runFloorWorker takes a job, answers it as gantry/echo answers {"echo": X} (the output X;
// without "echo", the input), and takes the next, until the process is killed or ctx ends.
// take and done are the RunPod webhook URLs (done with $ID for the job's id).
func runFloorWorker(ctx context.Context, take, done string) error {
	if take == "" || done == "" {
		return fmt.Errorf("%s needs RUNPOD_WEBHOOK_GET_JOB and RUNPOD_WEBHOOK_POST_OUTPUT", floorWorkerFlag)
	}
	c := &http.Client{Timeout: 2 * time.Minute}
	for ctx.Err() == nil {
		id, input, err := floorTake(ctx, c, take)
		if err != nil {
			select { // the floor is not up yet, or went away
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		if id == "" {
			continue // the long poll ended with nothing
		}
		if err := floorDone(ctx, c, strings.ReplaceAll(done, "$ID", id), echoOutput(input)); err != nil {
			fmt.Fprintln(os.Stderr, "floor worker:", err)
		}
	}
	return nil
}

// floorTake long-polls for a job: its id and input, or "" when the poll ended with nothing.
func floorTake(ctx context.Context, c *http.Client, url string) (string, json.RawMessage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode == http.StatusNoContent {
		return "", nil, nil
	}
	if resp.StatusCode != http.StatusOK {
		return "", nil, fmt.Errorf("job-take: %s", resp.Status)
	}
	var j struct {
		ID    string          `json:"id"`
		Input json.RawMessage `json:"input"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&j); err != nil {
		return "", nil, fmt.Errorf("job-take: %w", err)
	}
	return j.ID, j.Input, nil
}

// echoOutput is gantry/echo's output for the inputs the floor runs: "echo"'s value, or the input.
func echoOutput(input json.RawMessage) json.RawMessage {
	var in struct {
		Echo json.RawMessage `json:"echo"`
	}
	if json.Unmarshal(input, &in) == nil && in.Echo != nil {
		return in.Echo
	}
	return input
}

// floorDone posts the job's output.
func floorDone(ctx context.Context, c *http.Client, url string, output json.RawMessage) error {
	body, err := json.Marshal(map[string]json.RawMessage{"output": output})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("job-done: %s", resp.Status)
	}
	return nil
}
