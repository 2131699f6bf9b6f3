package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gantryhq/gantry/oas"
)

// This file is `gantry key create|list|revoke` over the API (offline: keysdata.go, keysstore.go).

// keyCmd runs `gantry key create|list|revoke` (and its alias `gantry keys`): over the API, or
// with --data on the server's data directory (the offline bootstrap of the first key), or with
// --store (or $GANTRY_STORE) on the PostgreSQL store replicas share.
func (a *app) keyCmd(ctx context.Context, args []string) error {
	sub, rest, err := a.subcommand("key", args, "create", "list", "revoke")
	if err != nil {
		return err
	}
	offline := a.getenv("GANTRY_STORE") != "" || slices.ContainsFunc(rest, func(s string) bool {
		for _, f := range []string{"data", "store"} {
			if s == "-"+f || s == "--"+f || strings.HasPrefix(s, "-"+f+"=") || strings.HasPrefix(s, "--"+f+"=") {
				return true
			}
		}
		return false
	})
	if offline {
		switch sub {
		case "create":
			return keysCreate(rest, a.stdout, a.stderr)
		case "list":
			return keysList(rest, a.stdout, a.stderr)
		}
		return keysRevoke(rest, a.stdout, a.stderr)
	}
	switch sub {
	case "create":
		return a.keyCreate(ctx, rest)
	case "list":
		return a.call("key list", "gantry key list [--data DIR]\n\nLists your user's keys (with --data: every key of that data directory).",
			rest, nil, offlineFlag, func(cn *conn, _ []string) error {
				ks, err := answer[oas.KeyListHeaders](cn.api.ListKeys(ctx)).get(cn, "listing keys")
				if err != nil {
					return err
				}
				return cn.out.emit(&ks.Response, func(t *table) {
					t.row("ID", "USER", "SCOPE", "ENDPOINTS", "CREATED", "EXPIRES")
					for _, k := range ks.Response.Items {
						expires := "never"
						if e, ok := k.ExpiresAt.Get(); ok {
							expires = when(e)
						}
						t.row(k.ID, k.User, string(k.Scope), strings.Join(k.Endpoints, ","), when(k.CreatedAt), expires)
					}
				})
			})
	}
	return a.call("key revoke", "gantry key revoke KEY_ID [--data DIR]\n\nRevokes one of your user's keys, and the keys made with it; servers refuse them within 10 s.",
		rest, []string{"KEY_ID"}, offlineFlag, func(cn *conn, pos []string) error {
			if _, err := answer[oas.DeleteKeyNoContent](cn.api.DeleteKey(ctx, oas.DeleteKeyParams{KeyId: pos[0]})).get(cn, "revoking the key"); err != nil {
				return err
			}
			if cn.out.format == "table" {
				_, err := fmt.Fprintf(a.stdout, "Revoked key %s and any keys made with it; servers refuse them within 10 s.\n", pos[0])
				return err
			}
			return cn.out.raw([]byte(fmt.Sprintf(`{"id":%q,"revoked":true}`, pos[0])))
		})
}

// offlineFlag documents --data and --store in the help of the key commands over the API;
// keyCmd sends a command line with either to the offline commands before any flag is parsed.
func offlineFlag(fs *flag.FlagSet) {
	fs.String("data", "", "work offline on this server data directory instead of over the API (the first key of a fresh server)")
	fs.String("store", "", "work offline on this PostgreSQL store (postgres://...) instead of over the API (default $GANTRY_STORE)")
}

// keyCreate issues a key for the caller's own user over the API.
func (a *app) keyCreate(ctx context.Context, args []string) error {
	fs := a.flagSet("key create", "gantry key create [--scope all|read|jobs] [--endpoint ID]... [--expires 720h] [--quota-minute N]...\n\n"+
		"Issues a key for your own user (it needs a key of scope all) and prints it as the last line;\n"+
		"it is shown once. The quota flags may only lower your user's quota. With --data DIR --user NAME\n"+
		"it issues a key offline on the server's data directory instead (gantry key create --data DIR --help).")
	c := a.commonFlags(fs)
	scope := fs.String("scope", "all", "what the key may do: all, read (reads only) or jobs (job operations only)")
	var endpoints stringList
	fs.Var(&endpoints, "endpoint", "with --scope jobs: an endpoint (or model) id the key may use (repeatable; none = all)")
	expires := fs.Duration("expires", 0, "the key's lifetime, e.g. 720h (0 = never expires)")
	var qMinute, qHour, qDay quotaFlag
	fs.Var(&qMinute, "quota-minute", "lower your user's requests-per-minute quota to `number`")
	fs.Var(&qHour, "quota-hour", "lower your user's requests-per-hour quota to `number`")
	fs.Var(&qDay, "quota-day", "lower your user's requests-per-day quota to `number`")
	user := fs.String("user", "", "only with --data: the user the key is for")
	offlineFlag(fs)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := needArgs(fs, pos); err != nil {
		return err
	}
	if *user != "" {
		return usagef("--user needs --data: over the API a key is always for your own user")
	}
	if *expires < 0 || (*expires > 0 && *expires < time.Second) {
		return usagef("--expires %v: want at least 1s, or 0 for never", *expires)
	}
	req := &oas.CreateKeyRequest{Scope: oas.NewOptKeyScope(oas.KeyScope(*scope)), Endpoints: endpoints}
	if *expires > 0 {
		req.ExpiresIn = oas.NewOptInt64(int64(expires.Seconds()))
	}
	if qMinute.set || qHour.set || qDay.set {
		var q oas.KeyQuota
		for _, f := range []struct {
			flag *quotaFlag
			dst  *oas.OptInt
		}{{&qMinute, &q.Minute}, {&qHour, &q.Hour}, {&qDay, &q.Day}} {
			if f.flag.set {
				*f.dst = oas.NewOptInt(f.flag.n)
			}
		}
		req.Quota = oas.NewOptKeyQuota(q)
	}
	cn, err := a.connect(c)
	if err != nil {
		return err
	}
	k, err := answer[oas.CreatedKeyHeaders](cn.api.CreateKey(ctx, req)).get(cn, "creating the key")
	if err != nil {
		return err
	}
	if cn.out.format != "table" {
		return cn.out.emit(&k.Response, nil)
	}
	_, err = fmt.Fprintf(a.stdout, "Created key %s for %s (scope %s). It is shown once; keep it safe:\n%s\n", k.Response.ID, k.Response.User, k.Response.Scope, k.Response.Secret)
	return err
}
