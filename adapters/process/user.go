package process

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// workerUser is the account a pool's workers run as, when it is not the server's own.
type workerUser struct {
	name     string   // the user's name, or the uid as configured, for messages
	uid, gid uint32   // the worker's user and group
	groups   []uint32 // its supplementary groups (the user's, from the group database)
	home     string   // its home directory, the workers' HOME; "" = keep the server's
}

// String names the user for messages: `nobody (uid 65534)`.
func (u *workerUser) String() string {
	return fmt.Sprintf("%s (uid %d)", u.name, u.uid)
}

// credential is what the worker's process switches to before it runs its command.
func (u *workerUser) credential() *syscall.Credential {
	return &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: slices.Clone(u.groups)}
}

// lookupUser resolves Config.User: a user name, a uid or "uid:gid". A name must exist in the
// user database; a uid need not (then its group is the uid's number, and it has no home).
func lookupUser(spec string) (*workerUser, error) {
	u := &workerUser{name: spec}
	idPart, gidPart, hasGID := strings.Cut(spec, ":")
	if uid, err := strconv.ParseUint(idPart, 10, 32); err == nil {
		u.uid, u.gid = uint32(uid), uint32(uid)
		if pw, err := user.LookupId(idPart); err == nil {
			u.fill(pw)
		}
		if hasGID {
			gid, err := strconv.ParseUint(gidPart, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("user %q: want a user name, a uid or uid:gid", spec)
			}
			u.gid, u.groups = uint32(gid), nil
		}
		return u, nil
	}
	if hasGID {
		return nil, fmt.Errorf("user %q: want a user name, a uid or uid:gid", spec)
	}
	pw, err := user.Lookup(spec)
	if err != nil {
		return nil, fmt.Errorf("user %q: %w (create it, e.g. `useradd --system gantry-worker`, or give a uid)", spec, err)
	}
	uid, err := strconv.ParseUint(pw.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %q has uid %q", spec, pw.Uid)
	}
	u.uid = uint32(uid)
	u.fill(pw)
	return u, nil
}

// fill takes the name, group, supplementary groups and home of a user database entry.
func (u *workerUser) fill(pw *user.User) {
	if gid, err := strconv.ParseUint(pw.Gid, 10, 32); err == nil {
		u.gid = uint32(gid)
	}
	if ids, err := pw.GroupIds(); err == nil {
		for _, id := range ids {
			if g, err := strconv.ParseUint(id, 10, 32); err == nil && uint32(g) != u.gid {
				u.groups = append(u.groups, uint32(g))
			}
		}
	}
	u.home, u.name = pw.HomeDir, pw.Username
}

// checkUser decides who a pool's workers run as: nil (the server's own user) when spec is ""
// or names the server's user, else the user it names. Root is refused: a worker runs what an
// endpoint's env and args make of the operator's command, and must not be able to read the
// server's data. Another user than the server's needs a server running as root.
func checkUser(spec string) (*workerUser, error) {
	if spec == "" {
		return nil, nil
	}
	u, err := lookupUser(spec)
	if err != nil {
		return nil, err
	}
	euid := os.Geteuid()
	switch {
	case u.uid == 0:
		return nil, fmt.Errorf("user %q is root: workers would run tenants' env and args with every privilege; name an unprivileged user (default nobody)", spec)
	case int(u.uid) == euid:
		return nil, nil // already so; setgroups would need privileges
	case euid != 0:
		return nil, fmt.Errorf("user %s: only a server running as root can start workers as another user (this one runs as uid %d); run it as root, or leave user unset", u, euid)
	}
	return u, nil
}

// canRun returns an error saying why u may not run the program at path (search every directory
// on the way, execute the file), nil when it may.
func (u *workerUser) canRun(path string) error {
	real, err := filepath.EvalSymlinks(path)
	if err == nil {
		real, err = filepath.Abs(real)
	}
	if err != nil {
		return fmt.Errorf("the worker program %s: %w", path, err)
	}
	dir := string(filepath.Separator)
	for _, part := range strings.Split(strings.Trim(real, string(filepath.Separator)), string(filepath.Separator)) {
		if err := u.may(dir, 0o1); err != nil {
			return fmt.Errorf("user %s cannot run %s: %w", u, path, err)
		}
		dir = filepath.Join(dir, part)
	}
	if err := u.may(real, 0o1); err != nil {
		return fmt.Errorf("user %s cannot run %s: %w", u, path, err)
	}
	return nil
}

// thisBinary is the running executable as the kernel names it to each process: a child that
// executes it reaches the file without searching the directories above it.
const thisBinary = "/proc/self/exe"

// builtinPath returns what u's workers execute to run self, the built-in workers' binary:
// "" when they can run self itself, thisBinary when self is the running binary in a
// directory u cannot search (its file must still be executable by u), or why neither works.
func (u *workerUser) builtinPath(self string) (string, error) {
	err := u.canRun(self)
	if err == nil {
		return "", nil
	}
	a, aerr := os.Stat(self)
	b, berr := os.Stat(thisBinary)
	if aerr != nil || berr != nil || !os.SameFile(a, b) {
		return "", err
	}
	if merr := u.may(thisBinary, 0o1); merr != nil {
		return "", fmt.Errorf("user %s cannot run %s: %w", u, self, merr)
	}
	return thisBinary, nil
}

// may returns an error unless u has the permission bits want (as "other": 4 read, 1 execute
// or search) on path, through the owner's, the group's or the others' bits as Unix picks them.
func (u *workerUser) may(path string, want fs.FileMode) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	mode := fi.Mode().Perm()
	bits := mode & 0o7
	switch {
	case st.Uid == u.uid:
		bits = mode >> 6 & 0o7
	case st.Gid == u.gid || slices.Contains(u.groups, st.Gid):
		bits = mode >> 3 & 0o7
	}
	if bits&want != want {
		return fmt.Errorf("%s is mode %v, owner uid %d, group %d", path, fi.Mode(), st.Uid, st.Gid)
	}
	return nil
}

// errAccess reports whether err is a refused permission (worth naming the worker's user).
func errAccess(err error) bool { return errors.Is(err, fs.ErrPermission) }
