package server

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/scheduler"
	"github.com/gantryhq/gantry/store/filedir"
	"github.com/gantryhq/gantry/store/keydir"
	"github.com/gantryhq/gantry/store/memq"
	"github.com/gantryhq/gantry/store/pebble"
	"github.com/gantryhq/gantry/store/postgres"
)

// Stores are a server's stores, one per port core declares: the embedded ones in Config.Data,
// or the shared PostgreSQL that Config.Store names. OpenStores opens them; Close releases them.
type Stores struct {
	Endpoints core.EndpointStore
	Templates core.TemplateStore
	Volumes   core.VolumeStore         // users' network volumes
	Source    scheduler.EndpointSource // every endpoint, for the scheduler's sync
	Keys      core.KeyStore
	Usage     core.UsageStore
	History   core.HistoryStore // the endpoints' per-minute history
	Files     core.FileStore
	FileKey   []byte // signs file URLs; every replica must share it
	Tokens    core.WorkerTokenStore
	Limits    core.RateLimits
	// Leases elects the replica that runs the autoscaler and pools; nil = this server is the
	// only replica (the embedded store), always the leader.
	Leases core.Leases
	// Check tells whether the shared store answers, for /healthz; nil on the embedded store,
	// which is this process's own files.
	Check func(context.Context) error
	// Pebble is the embedded store, when one is open.
	Pebble *pebble.Store

	jobs    func(ctx context.Context, o memq.Options) (core.JobStore, error)
	closers []func() // run last first by Close
}

// EndpointFollower is a store that tells of the endpoints other replicas change (the shared
// store's capability): changed hears each id, or "" when it may have missed some and they all
// must be read again. It runs until ctx ends.
type EndpointFollower interface {
	FollowEndpoints(ctx context.Context, log *slog.Logger, changed func(ctx context.Context, id string))
}

// Both stores read single endpoints too: the leader's scheduler reads one it has not heard of
// yet when a LOAD_BALANCER request for it arrives (scheduler.EndpointGetter). PostgreSQL's
// follows the other replicas' changes.
var (
	_ scheduler.EndpointGetter = (*pebble.Store)(nil)
	_ scheduler.EndpointGetter = (*postgres.DB)(nil)
	_ EndpointFollower         = (*postgres.DB)(nil)
)

// Jobs opens the job store, which Close stops: memq's index and queues over Pebble's records
// (loading the stored jobs), or PostgreSQL's jobs. It is opened once, by the engine.
func (st *Stores) Jobs(ctx context.Context, o memq.Options) (core.JobStore, error) {
	return st.jobs(ctx, o)
}

// Close releases the stores, the last opened first.
func (st *Stores) Close() {
	for _, c := range slices.Backward(st.closers) {
		c()
	}
	st.closers = nil
}

// IsPostgresURL reports whether store names a PostgreSQL database (postgres:// or
// postgresql://), as Config.Store may.
func IsPostgresURL(store string) bool {
	return strings.HasPrefix(store, "postgres://") || strings.HasPrefix(store, "postgresql://")
}

// fileKeyName is the name of the file-signing key among PostgreSQL's secrets.
const fileKeyName = "file-url-key"

// OpenStores opens the stores a valid cfg names: Pebble, the key directory and the file
// directory in cfg.Data by default; with cfg.Store, PostgreSQL for everything replicas share.
// log hears what the stores cannot do in the background. On an error nothing stays open.
func OpenStores(ctx context.Context, cfg Config, log *slog.Logger) (_ *Stores, err error) {
	st := &Stores{}
	defer func() {
		if err != nil {
			st.Close()
		}
	}()
	if cfg.Store != "" {
		return st, st.openPostgres(ctx, cfg, log)
	}
	return st, st.openEmbedded(cfg)
}

// openEmbedded opens the embedded stores in cfg.Data: one process's own, no replicas.
func (st *Stores) openEmbedded(cfg Config) error {
	if err := privateDataDir(cfg.Data); err != nil {
		return err
	}
	db, err := pebble.Open(filepath.Join(cfg.Data, "pebble"))
	if err != nil {
		return err
	}
	st.closers = append(st.closers, func() { _ = db.Close() })
	keys, err := keydir.Open(cfg.Data)
	if err != nil {
		return err
	}
	st.closers = append(st.closers, keys.Close)
	fileDir, err := filedir.Open(filepath.Join(cfg.Data, "files"))
	if err != nil {
		return err
	}
	fileKey, err := filedir.LoadKey(filepath.Join(cfg.Data, "files.key"))
	if err != nil {
		return fmt.Errorf("loading the file-signing key: %w", err)
	}
	st.Endpoints, st.Templates, st.Volumes, st.Source, st.Keys, st.Usage, st.History = db, db, db, db, keys, db, db
	st.Files, st.FileKey, st.Tokens, st.Limits, st.Pebble = fileDir, fileKey, db, &core.RateLimiter{}, db
	st.jobs = func(_ context.Context, o memq.Options) (core.JobStore, error) { return db.Jobs(o) }
	return nil
}

// KeyStores are the stores the keys commands work on, beside the servers that run: the key
// store of a Config (the key directory in Data, or PostgreSQL's keys, which every replica
// reads) and the endpoints a key may name. OpenKeyStores opens them; Close releases them.
type KeyStores struct {
	Keys core.KeyStore
	// Shared tells that Keys is the shared store's (Config.Store).
	Shared bool

	endpoints func() (core.EndpointStore, func(), error)
	close     func()
}

// ErrStoreInUse is KeyStores.Endpoints' error while a running server holds the embedded store.
var ErrStoreInUse = errors.New("the store is in use (by a running gantry serve?)")

// OpenKeyStores opens the key store of a valid cfg: PostgreSQL's keys when cfg.Store names it,
// else the key directory in cfg.Data (created if missing). Unlike OpenStores it opens nothing
// else, and leaves the data directory's modes alone: it runs beside a server.
func OpenKeyStores(ctx context.Context, cfg Config) (*KeyStores, error) {
	if cfg.Store != "" {
		db, err := postgres.Open(ctx, cfg.Store)
		if err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		return &KeyStores{Keys: db, Shared: true, close: db.Close,
			endpoints: func() (core.EndpointStore, func(), error) { return db, func() {}, nil }}, nil
	}
	dir, err := keydir.Open(cfg.Data)
	if err != nil {
		return nil, err
	}
	return &KeyStores{Keys: dir, close: dir.Close, endpoints: func() (core.EndpointStore, func(), error) {
		path := filepath.Join(cfg.Data, "pebble")
		if _, err := os.Stat(path); err != nil {
			return nil, nil, fmt.Errorf("%s has no store yet: %w", cfg.Data, fs.ErrNotExist)
		}
		db, err := pebble.Open(path)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %v", ErrStoreInUse, err)
		}
		return db, func() { _ = db.Close() }, nil
	}}, nil
}

// Endpoints opens the endpoint store, to check the endpoints a key names, and returns its
// release. The embedded store cannot be read while a server holds it (ErrStoreInUse), nor
// before a server has made it (fs.ErrNotExist).
func (k *KeyStores) Endpoints() (core.EndpointStore, func(), error) { return k.endpoints() }

// Close releases the key store.
func (k *KeyStores) Close() { k.close() }

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
// PostgreSQL; cfg.Data is not used. What runs in the background (the key cache, the job
// store's listener) outlives ctx, which bounds only the opening: Close stops it.
func (st *Stores) openPostgres(ctx context.Context, cfg Config, log *slog.Logger) error {
	db, err := postgres.Open(ctx, cfg.Store)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	st.closers = append(st.closers, db.Close)
	tokens, err := db.WorkerTokens(ctx, log)
	if err != nil {
		return err
	}
	st.closers = append(st.closers, tokens.Close)
	keys := db.KeyCache(log) // every request reads its key and user: from memory, once seen
	if err := keys.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	st.closers = append(st.closers, keys.Stop)
	pinger := db.Pinger() // /healthz: one connection of its own, never the busy pool's
	st.closers = append(st.closers, pinger.Close)
	fresh := make([]byte, filedir.KeySize)
	_, _ = rand.Read(fresh)
	fileKey, err := db.Secret(ctx, fileKeyName, fresh)
	if err != nil {
		return fmt.Errorf("loading the file-signing key: %w", err)
	}
	st.Endpoints, st.Templates, st.Volumes, st.Source, st.Keys, st.Usage, st.History = db, db, db, db, keys, db, db
	st.Files, st.FileKey, st.Tokens, st.Limits, st.Leases, st.Check = db, fileKey, tokens, db.RateLimits(), db.Leases(), pinger.Ping
	st.jobs = func(ctx context.Context, o memq.Options) (core.JobStore, error) {
		jobs := postgres.NewJobs(db, postgres.JobOptions{Log: o.Log})
		if err := jobs.Start(context.WithoutCancel(ctx)); err != nil {
			return nil, err
		}
		st.closers = append(st.closers, jobs.Stop) // before the pool closes
		return jobs, nil
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
