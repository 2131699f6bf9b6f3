package kit

import "strings"

// RebaseURL points a worker-protocol URL at base (scheme and host, with an optional path
// prefix, no trailing slash): the scheme and host Gantry gave it are replaced, its path and
// query kept. Pools whose workers cannot reach Gantry at its own address (pods in a cluster,
// rented machines in a cloud) hand their workers rebased URLs.
func RebaseURL(u, base string) string {
	_, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u
	}
	i := strings.IndexByte(rest, '/')
	if i < 0 {
		return base
	}
	return base + rest[i:]
}

// RebaseEnv returns a copy of a worker's environment whose worker-protocol URLs
// (RUNPOD_WEBHOOK_*) are rebased onto base; with base empty it returns env itself.
func RebaseEnv(env map[string]string, base string) map[string]string {
	if base == "" {
		return env
	}
	out := make(map[string]string, len(env))
	for k, v := range env {
		if strings.HasPrefix(k, "RUNPOD_WEBHOOK_") {
			v = RebaseURL(v, base)
		}
		out[k] = v
	}
	return out
}
