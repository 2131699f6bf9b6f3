package postgres

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// follow LISTENs on channel with a connection of its own, and calls fn with each
// notification's payload (caught true); with caught false when it may have missed some: once
// connected (and again after each reconnect) and, when poll > 0, after each poll of quiet. It
// reconnects a second after the connection fails, until ctx ends. fn runs on follow's
// goroutine; an error from it is logged and treated as a lost connection.
//
// LISTEN needs a session: through a transaction-pooling proxy notifications do not arrive,
// and the callers' polls (or the resyncs they do on caught false) are what keeps them current.
func (db *DB) follow(ctx context.Context, channel string, poll time.Duration, log *slog.Logger, fn func(ctx context.Context, payload string, caught bool) error) {
	for ctx.Err() == nil {
		err := db.listenOnce(ctx, channel, poll, fn)
		if ctx.Err() != nil {
			return
		}
		log.Warn("following "+channel+": reconnecting", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// listenOnce holds one LISTEN connection until it fails or ctx ends.
func (db *DB) listenOnce(ctx context.Context, channel string, poll time.Duration, fn func(ctx context.Context, payload string, caught bool) error) error {
	// A connection of its own, outside the pool: it is held for as long as it follows.
	conn, err := pgx.ConnectConfig(ctx, db.Pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
		return err
	}
	if err := fn(ctx, "", false); err != nil { // what changed while no one listened
		return err
	}
	for {
		waitCtx, cancel := ctx, context.CancelFunc(func() {})
		if poll > 0 {
			waitCtx, cancel = context.WithTimeout(ctx, poll)
		}
		n, err := conn.WaitForNotification(waitCtx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err == nil:
			err = fn(ctx, n.Payload, true)
		case errors.Is(err, context.DeadlineExceeded):
			err = fn(ctx, "", false)
		}
		if err != nil {
			return err
		}
	}
}

// endpointsChannel is the NOTIFY channel an endpoint's change is announced on, with its id.
const endpointsChannel = "gantry_endpoints"

// FollowEndpoints calls changed with the id of each endpoint any replica creates, updates or
// deletes, until ctx ends; with "" when changes may have been missed (at the start, and after
// a lost connection): then the caller reads them all again.
func (db *DB) FollowEndpoints(ctx context.Context, log *slog.Logger, changed func(ctx context.Context, id string)) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	db.follow(ctx, endpointsChannel, 0, log, func(ctx context.Context, id string, caught bool) error {
		if !caught {
			id = ""
		}
		changed(ctx, id)
		return nil
	})
}
