package pebble

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/go-faster/jx"

	"github.com/gantryhq/gantry/core"
)

// Job records are written several times in a job's life, so they have a hand-written codec:
// JSON still (readable when debugging), times as Unix nanoseconds (0 = unset), no reflection.

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// recordFixed bounds a record's bytes beside its strings and raw parts: field names, numbers,
// quotes and commas (a queued job's record is about 400 bytes).
const recordFixed = 512

func encodeJob(j *core.Job) []byte {
	var e jx.Encoder
	// One buffer of about the record's size: growing from empty took seven allocations and
	// copies on every durable /run.
	e.SetBytes(make([]byte, 0, recordFixed+len(j.ID)+len(j.Endpoint)+len(j.Owner)+len(j.Webhook)+len(j.S3Config)+
		len(j.Output)+len(j.Error)+len(j.WorkerID)))
	e.ObjStart()
	e.FieldStart("id")
	e.Str(j.ID)
	e.FieldStart("endpoint")
	e.Str(j.Endpoint)
	e.FieldStart("owner")
	e.Str(j.Owner)
	e.FieldStart("status")
	e.Str(string(j.Status))
	if j.Sync {
		e.FieldStart("sync")
		e.Bool(true)
	}
	if j.Webhook != "" {
		e.FieldStart("webhook")
		e.Str(j.Webhook)
	}
	e.FieldStart("policy")
	e.ObjStart()
	e.FieldStart("executionTimeout")
	e.Int64(j.Policy.ExecutionTimeoutMs)
	e.FieldStart("lowPriority")
	e.Bool(j.Policy.LowPriority)
	e.FieldStart("ttl")
	e.Int64(j.Policy.TTLMs)
	e.ObjEnd()
	e.FieldStart("timeoutMs")
	e.Int64(j.TimeoutMs)
	if len(j.S3Config) > 0 {
		e.FieldStart("s3Config")
		e.Raw(j.S3Config)
	}
	if len(j.Output) > 0 {
		e.FieldStart("output")
		e.Raw(j.Output)
	}
	if j.Error != "" {
		e.FieldStart("error")
		e.Str(j.Error)
	}
	e.FieldStart("retries")
	e.Int(j.Retries)
	if j.WorkerID != "" {
		e.FieldStart("workerId")
		e.Str(j.WorkerID)
	}
	e.FieldStart("seq")
	e.UInt64(j.Seq)
	if j.Streamed {
		e.FieldStart("streamed")
		e.Bool(true)
	}
	if j.WebhookPending {
		e.FieldStart("webhookPending")
		e.Bool(true)
	}
	if j.Cost != nil {
		if b, err := json.Marshal(j.Cost); err == nil { // rare: only completed model jobs
			e.FieldStart("cost")
			e.Raw(b)
		}
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"createdAt", nanos(j.CreatedAt)}, {"queuedAt", nanos(j.QueuedAt)}, {"startedAt", nanos(j.StartedAt)},
		{"endedAt", nanos(j.EndedAt)}, {"retention", int64(j.Retention)}, {"expiresAt", nanos(j.ExpiresAt)},
	} {
		e.FieldStart(f.name)
		e.Int64(f.v)
	}
	e.ObjEnd()
	return e.Bytes()
}

func decodeJob(b []byte, j *core.Job) error {
	d := jx.DecodeBytes(b)
	err := d.ObjBytes(func(d *jx.Decoder, k []byte) error {
		var err error
		switch string(k) {
		case "id":
			j.ID, err = d.Str()
		case "endpoint":
			j.Endpoint, err = d.Str()
		case "owner":
			j.Owner, err = d.Str()
		case "status":
			var s string
			s, err = d.Str()
			j.Status = core.JobStatus(s)
		case "sync":
			j.Sync, err = d.Bool()
		case "webhook":
			j.Webhook, err = d.Str()
		case "policy":
			err = d.ObjBytes(func(d *jx.Decoder, k []byte) error {
				var err error
				switch string(k) {
				case "executionTimeout":
					j.Policy.ExecutionTimeoutMs, err = d.Int64()
				case "lowPriority":
					j.Policy.LowPriority, err = d.Bool()
				case "ttl":
					j.Policy.TTLMs, err = d.Int64()
				default:
					err = d.Skip()
				}
				return err
			})
		case "timeoutMs":
			j.TimeoutMs, err = d.Int64()
		case "s3Config":
			j.S3Config, err = raw(d)
		case "output":
			j.Output, err = raw(d)
		case "error":
			j.Error, err = d.Str()
		case "retries":
			j.Retries, err = d.Int()
		case "workerId":
			j.WorkerID, err = d.Str()
		case "seq":
			j.Seq, err = d.UInt64()
		case "streamed":
			j.Streamed, err = d.Bool()
		case "webhookPending":
			j.WebhookPending, err = d.Bool()
		case "cost":
			var r jx.Raw
			if r, err = d.Raw(); err == nil {
				j.Cost = &core.Charge{}
				err = json.Unmarshal(r, j.Cost)
			}
		case "createdAt", "queuedAt", "startedAt", "endedAt", "retention", "expiresAt":
			var n int64
			n, err = d.Int64()
			switch string(k) {
			case "createdAt":
				j.CreatedAt = fromNanos(n)
			case "queuedAt":
				j.QueuedAt = fromNanos(n)
			case "startedAt":
				j.StartedAt = fromNanos(n)
			case "endedAt":
				j.EndedAt = fromNanos(n)
			case "retention":
				j.Retention = time.Duration(n)
			case "expiresAt":
				j.ExpiresAt = fromNanos(n)
			}
		default:
			err = d.Skip()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("decoding job record: %w", err)
	}
	return nil
}

// raw copies the next JSON value (the decoder's buffer belongs to the store).
func raw(d *jx.Decoder) (json.RawMessage, error) {
	r, err := d.Raw()
	if err != nil {
		return nil, err
	}
	return append(json.RawMessage(nil), r...), nil
}
