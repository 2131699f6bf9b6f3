package server

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/scheduler"
	"github.com/gantryhq/gantry/store/filedir"
	"github.com/gantryhq/gantry/store/keydir"
	"github.com/gantryhq/gantry/store/memq"
	"github.com/gantryhq/gantry/store/pebble"
	"github.com/gantryhq/gantry/store/postgres"
)

// stores are the server's stores, one per port, from the embedded ones in Config.Data or the
// shared PostgreSQL that Config.Store names.
type stores struct {
	endpoints core.EndpointStore
	templates core.TemplateStore
	source    scheduler.EndpointSource // every endpoint, for the scheduler's sync
	keys      core.KeyStore
	usage     core.UsageStore
	history   core.HistoryStore // the endpoints' per-minute history
	files     core.FileStore
	fileKey   []byte // signs file URLs; every replica must share it
	tokens    core.WorkerTokenStore
	limits    core.RateLimits
	// leases elects the replica that runs the autoscaler and pools; nil = this server is the
	// only replica (the embedded store), always the leader.
	leases core.Leases
	// jobs opens the job store.
	jobs func(memq.Options) (core.JobStore, error)
	// check tells whether the shared store answers, for /healthz; nil on the embedded store,
	// which is this process's own files.
	check func(context.Context) error

	pebble *pebble.Store // the embedded store, when one is open
	pg     *postgres.DB  // the shared store, when Config.Store names one
}

// Both stores read single endpoints too: the leader's scheduler reads one it has not heard of
// yet when a LOAD_BALANCER request for it arrives (scheduler.EndpointGetter).
var (
	_ scheduler.EndpointGetter = (*pebble.Store)(nil)
	_ scheduler.EndpointGetter = (*postgres.DB)(nil)
)

// IsPostgresURL reports whether store names a PostgreSQL database (postgres:// or
// postgresql://), as Config.Store may.
func IsPostgresURL(store string) bool {
	return strings.HasPrefix(store, "postgres://") || strings.HasPrefix(store, "postgresql://")
}

// fileKeyName is the name of the file-signing key among PostgreSQL's secrets.
const fileKeyName = "file-url-key"

// openStores opens the stores cfg names: Pebble, the key directory and the file directory in
// cfg.Data by default; with cfg.Store, PostgreSQL for everything replicas share.
func (s *Server) openStores(ctx context.Context) error {
	cfg := &s.cfg
	if cfg.Store != "" {
		return s.openPostgres(ctx)
	}
	if err := privateDataDir(cfg.Data); err != nil {
		return err
	}
	st, err := pebble.Open(filepath.Join(cfg.Data, "pebble"))
	if err != nil {
		return err
	}
	s.closers = append(s.closers, func() { st.Close() })
	keys, err := keydir.Open(cfg.Data)
	if err != nil {
		return err
	}
	s.closers = append(s.closers, keys.Close)
	fileDir, err := filedir.Open(filepath.Join(cfg.Data, "files"))
	if err != nil {
		return err
	}
	fileKey, err := filedir.LoadKey(filepath.Join(cfg.Data, "files.key"))
	if err != nil {
		return fmt.Errorf("loading the file-signing key: %w", err)
	}
	s.st = stores{
		endpoints: st, templates: st, source: st, keys: keys, usage: st, history: st, files: fileDir, fileKey: fileKey,
		tokens: st, limits: &core.RateLimiter{}, pebble: st,
		jobs: func(o memq.Options) (core.JobStore, error) { return st.Jobs(o) },
	}
	return nil
}

// privateDataDir creates the data directory, or makes an existing one private: it and
// everything under it lose every group and other permission (directories 0700, files 0600),
// so that only the server's user reads the store, the keys and the file-signing key, and no
// process-pool worker, which runs as another user, does. Files the embedded store creates
// later inside keep its own modes, out of others' reach below the 0700 directory. What the
// network volumes under volumes/ hold is the workers' and keeps its modes (the directory
// itself is made private).
func privateDataDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating the data directory: %w", err)
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // gone while we walked
		}
		if err != nil {
			return fmt.Errorf("making the data directory private: %w", err)
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil // chmod would change what it points to
		}
		fi, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("making the data directory private: %w", err)
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			if err := os.Chmod(path, perm&^0o077); err != nil {
				return fmt.Errorf("making the data directory private: %w", err)
			}
		}
		if d.IsDir() && path == filepath.Join(dir, volumesDir) {
			return fs.SkipDir
		}
		return nil
	})
}

// volumesDir is the directory under the data directory where local pools keep network
// volumes by default.
const volumesDir = "volumes"

// openPostgres opens the shared store: everything replicas share, jobs included, lives in
// PostgreSQL; cfg.Data is not used.
func (s *Server) openPostgres(ctx context.Context) error {
	cfg := &s.cfg
	db, err := postgres.Open(ctx, cfg.Store)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	s.closers = append(s.closers, db.Close)
	tokens, err := db.WorkerTokens(ctx, s.log)
	if err != nil {
		return err
	}
	s.closers = append(s.closers, tokens.Close)
	keys := db.KeyCache(s.log) // every request reads its key and user: from memory, once seen
	s.closers = append(s.closers, keys.Close)
	pinger := db.Pinger() // /healthz: one connection of its own, never the busy pool's
	s.closers = append(s.closers, pinger.Close)
	fresh := make([]byte, filedir.KeySize)
	_, _ = rand.Read(fresh)
	fileKey, err := db.Secret(ctx, fileKeyName, fresh)
	if err != nil {
		return fmt.Errorf("loading the file-signing key: %w", err)
	}
	s.st = stores{
		endpoints: db, templates: db, source: db, keys: keys, usage: db, history: db, files: db, fileKey: fileKey,
		tokens: tokens, limits: db.RateLimits(), leases: db.Leases(), pg: db, check: pinger.Ping,
		jobs: func(o memq.Options) (core.JobStore, error) {
			jobs, err := postgres.OpenJobs(ctx, db, postgres.JobOptions{Log: o.Log})
			if err != nil {
				return nil, err
			}
			s.closers = append(s.closers, jobs.Close) // before the pool closes
			return jobs, nil
		},
	}
	return nil
}

// redactURL hides the password of a URL for messages.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		if i := strings.LastIndex(raw, "@"); i >= 0 {
			return "…" + raw[i:]
		}
		return raw
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}
