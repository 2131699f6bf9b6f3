// Package pgtest gives tests a real PostgreSQL: one server per test binary, started from the
// machine's binaries (Debian's postgresql package), and a fresh database per test.
//
// It honours an external server too: with GANTRY_TEST_DATABASE_URL set, databases are made
// there instead. Without binaries or a URL the tests skip, saying why, unless
// GANTRY_REQUIRE_POSTGRES=1 (as in CI), which makes them fail.
//
// A package that uses it stops the server after its tests with Main (or Stop from its own
// TestMain); if the test binary dies first, the server gets a parent-death signal.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Server is a running PostgreSQL server.
type Server struct {
	// AdminURL connects to the server's "postgres" database as a superuser.
	AdminURL string
	dir      string
	cmd      *exec.Cmd
	done     chan struct{}
}

// Options tunes a server that Start makes.
type Options struct {
	// Durable keeps fsync on, for benchmarks that must pay for durability; tests leave it off.
	Durable bool
	// MaxConnections is max_connections; 0 means 300.
	MaxConnections int
	// Settings are more server settings, each "name=value" (as postgres -c takes them).
	Settings []string
}

var (
	shared    *Server
	sharedErr error
	once      sync.Once
	dbSeq     atomic.Int64
)

// URL returns the URL of a fresh, empty database for t, dropped when t ends. It skips t (or
// fails it under GANTRY_REQUIRE_POSTGRES=1) when no PostgreSQL can be had.
func URL(t testing.TB) string {
	t.Helper()
	admin := os.Getenv("GANTRY_TEST_DATABASE_URL")
	if admin == "" {
		once.Do(func() { shared, sharedErr = Start(Options{}) })
		if sharedErr != nil {
			if errors.Is(sharedErr, ErrNoBinaries) && os.Getenv("GANTRY_REQUIRE_POSTGRES") != "1" {
				t.Skipf("skipping: %v (install Debian's postgresql, set GANTRY_PG_BIN, or set GANTRY_TEST_DATABASE_URL)", sharedErr)
			}
			t.Fatalf("pgtest: %v", sharedErr)
		}
		admin = shared.AdminURL
	}
	name := fmt.Sprintf("gt_%d_%d", os.Getpid(), dbSeq.Add(1))
	url, err := CreateDatabase(context.Background(), admin, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := DropDatabase(ctx, admin, name); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return url
}

// Main runs a package's tests and then stops the shared server: call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	Stop()
	os.Exit(code)
}

// Stop stops the shared server, if URL started one.
func Stop() {
	if shared != nil {
		shared.Stop()
	}
}

// CreateDatabase makes database name on the server that adminURL reaches and returns its URL.
func CreateDatabase(ctx context.Context, adminURL, name string) (string, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("connect to %s: %w", redact(adminURL), err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return withDatabase(adminURL, name)
}

// DropDatabase drops database name, closing its connections first.
func DropDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", redact(adminURL), err)
	}
	defer func() { _ = conn.Close(ctx) }()
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	return err
}

// ErrNoBinaries means no PostgreSQL server binaries were found on this machine.
var ErrNoBinaries = errors.New("no PostgreSQL server binaries (initdb, postgres) found")

// Start initialises a new cluster in a temporary directory and starts a server on a free
// loopback port. As root it runs the binaries as the "postgres" user, since initdb refuses
// to run as root.
func Start(o Options) (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	if o.MaxConnections == 0 {
		o.MaxConnections = 300
	}
	dir, err := os.MkdirTemp("", "gantry-pg-")
	if err != nil {
		return nil, err
	}
	cred, err := credential(dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "--no-sync", "-A", "trust", "-U", "postgres", "-E", "UTF8", "-D", data)
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	port, err := freePort()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	args := []string{"-D", data, "-k", dir, "-h", "127.0.0.1", "-p", strconv.Itoa(port),
		"-c", "max_connections=" + strconv.Itoa(o.MaxConnections), "-c", "shared_buffers=128MB"}
	if !o.Durable {
		args = append(args, "-c", "fsync=off", "-c", "full_page_writes=off", "-c", "synchronous_commit=off")
	}
	for _, set := range o.Settings {
		args = append(args, "-c", set)
	}
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	defer func() { _ = logf.Close() }()
	cmd := exec.Command(filepath.Join(bin, "postgres"), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// SIGQUIT is PostgreSQL's immediate shutdown: if the test binary dies, so does the server.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	s := &Server{
		AdminURL: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port),
		dir:      dir, cmd: cmd, done: make(chan struct{}),
	}
	go func() { _ = cmd.Wait(); close(s.done) }() // its exit is told by s.done, its output by the log
	if err := s.waitReady(30 * time.Second); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

func (s *Server) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, s.AdminURL)
		cancel()
		if err == nil {
			_ = conn.Close(context.Background())
			return nil
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
			return fmt.Errorf("postgres exited at start: %s", log)
		case <-time.After(25 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres not ready after %s: %w", limit, err)
		}
	}
}

// Stop shuts the server down fast and removes its directory.
func (s *Server) Stop() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGINT) // fast shutdown
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	}
	_ = os.RemoveAll(s.dir)
}

// binDir finds initdb and postgres: GANTRY_PG_BIN, then the newest /usr/lib/postgresql/N/bin,
// then PATH.
func binDir() (string, error) {
	if d := os.Getenv("GANTRY_PG_BIN"); d != "" {
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Dir(real), nil
		}
	}
	return "", ErrNoBinaries
}

func version(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

// credential returns who runs the server: nil (ourselves) unless we are root, when it is the
// "postgres" user, given dir.
func credential(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs a postgres user to run the server as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// withDatabase returns the URL raw with its database replaced by name.
func withDatabase(raw, name string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("GANTRY_TEST_DATABASE_URL must be a postgres:// URL")
	}
	u.Path = "/" + name
	return u.String(), nil
}

func redact(url string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return "the database"
	}
	return fmt.Sprintf("%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
}
