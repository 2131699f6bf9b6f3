package core

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash"
	"strings"
	"sync"
	"time"
)

// SecretStore keeps named secrets that every replica of a server shares. A call whose ctx is
// done returns an error that wraps ctx.Err() and writes nothing.
type SecretStore interface {
	// Secret returns the secret stored under name. When there is none yet it stores fresh and
	// returns it: of callers racing to create it, in any replica, exactly one's fresh is kept
	// and all of them get that one.
	Secret(ctx context.Context, name string, fresh []byte) ([]byte, error)
}

// WorkerRevocations records the workers whose tokens are revoked, for every replica. A call
// whose ctx is done returns an error that wraps ctx.Err() and writes nothing.
type WorkerRevocations interface {
	// RevokeWorker revokes the tokens of worker, durably, before it returns. until is when the
	// last of them expires: past it they are refused anyway, and the store may forget the
	// revocation (it may judge "past" by its own wall clock).
	RevokeWorker(ctx context.Context, worker string, until time.Time) error
	// WorkerRevoked reports whether worker's tokens are revoked. Every worker request asks it,
	// so it must answer from memory (kept current with the other replicas' revocations), not
	// with a round trip to a database.
	WorkerRevoked(ctx context.Context, worker string) (bool, error)
}

// WorkerTokenStore is what signed worker tokens need kept: the signing key and revocations.
type WorkerTokenStore interface {
	SecretStore
	WorkerRevocations
}

// WorkerTokenLife is how long a worker token is valid after it is issued. A RunPod worker reads
// its token (RUNPOD_AI_API_KEY) once at start and cannot renew it, so the token must outlive
// the worker: 30 days is far longer than workers usually live, and bounds how long a
// revocation must be remembered (a revocation list holds at most 30 days of stopped workers).
const WorkerTokenLife = 30 * 24 * time.Hour

// WorkerTokenRecycle is how long before its token expires a worker is asked to recycle: from
// then on it counts as having asked for stopPod, so the autoscaler retires it once it holds no
// job, and starts a fresh one (with a fresh token) if there is work. A worker still busy at the
// expiry has its posts refused (401); it then falls silent and the worker-lost rule applies:
// its job goes back to the queue with one more retry.
const WorkerTokenRecycle = 24 * time.Hour

// WorkerTokenPrefix starts every worker token (api recognises worker tokens by it).
const WorkerTokenPrefix = "gw_"

// workerTokenKeyName is the SecretStore name of the worker-token signing key.
const workerTokenKeyName = "worker-token-key"

// A worker token is WorkerTokenPrefix then, base64url without padding, a payload and its
// HMAC-SHA256 under the store's key:
//
//	version (1 byte) | expiry (8 bytes, Unix seconds, big-endian) |
//	endpoint length (1 byte) | endpoint | worker id | MAC (32 bytes)
//
// The token names its endpoint and worker, so a token used on another worker's route is told
// whose it is (403) rather than merely refused.
const (
	tokenVersion   = 1
	tokenHeaderLen = 1 + 8 + 1
	tokenMACLen    = sha256.Size
	// maxTokenText bounds the token text a check decodes: ids are at most 255 bytes each, so
	// no issued token is longer.
	maxTokenText = 1024
)

// tokenEncoding is strict (the unused bits of the last character must be zero): a token has
// one spelling, and no altered text of it is accepted.
var tokenEncoding = base64.RawURLEncoding.Strict()

// WorkerTokens issues and checks worker tokens: an HMAC over endpoint, worker id and expiry,
// under a key kept in the store, so any replica can check any replica's tokens with no state of
// its own, and a restart does not invalidate running workers' tokens. Revocation is by worker
// id, through the store.
type WorkerTokens struct {
	store   WorkerRevocations
	clock   Clock
	scratch sync.Pool // of *tokenScratch
}

// tokenScratch is what one check works in, reused so that a check allocates nothing.
type tokenScratch struct {
	mac  hash.Hash // HMAC-SHA256 under the key; reset before use
	text [maxTokenText]byte
	raw  [maxTokenText * 3 / 4]byte // text decoded
	sum  [tokenMACLen]byte
}

// NewWorkerTokens loads the signing key from st, creating it on first use.
func NewWorkerTokens(ctx context.Context, st WorkerTokenStore, clock Clock) (*WorkerTokens, error) {
	fresh := make([]byte, 32)
	_, _ = rand.Read(fresh)
	key, err := st.Secret(ctx, workerTokenKeyName, fresh)
	if err != nil {
		return nil, fmt.Errorf("loading the worker-token key: %w", err)
	}
	if len(key) < 32 {
		return nil, fmt.Errorf("the stored worker-token key is %d bytes; want at least 32", len(key))
	}
	t := &WorkerTokens{store: st, clock: clock}
	key = append([]byte(nil), key...)
	t.scratch.New = func() any { return &tokenScratch{mac: hmac.New(sha256.New, key)} }
	return t, nil
}

// newMemoryWorkerTokens returns tokens under a key of this process alone, with revocations in
// its memory: its tokens die with it. It is the default of a Jobs configured without any.
func newMemoryWorkerTokens(clock Clock) *WorkerTokens {
	t, err := NewWorkerTokens(context.Background(), &memoryTokenStore{}, clock)
	if err != nil {
		panic(err) // the memory store cannot fail
	}
	return t
}

// Issue returns a token for worker of endpoint, valid for WorkerTokenLife.
func (t *WorkerTokens) Issue(endpoint, worker string) string {
	if len(endpoint) > 255 || len(worker) > 255 {
		panic(fmt.Sprintf("core: a worker token for ids of %d and %d bytes; ids are at most 255", len(endpoint), len(worker)))
	}
	exp := t.clock.Now().Add(WorkerTokenLife).Unix()
	b := make([]byte, 0, tokenHeaderLen+len(endpoint)+len(worker)+tokenMACLen)
	b = append(b, tokenVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(exp))
	b = append(b, byte(len(endpoint)))
	b = append(b, endpoint...)
	b = append(b, worker...)
	sc := t.scratch.Get().(*tokenScratch)
	b = sc.sign(b, b)
	t.scratch.Put(sc)
	return WorkerTokenPrefix + tokenEncoding.EncodeToString(b)
}

// sign appends the MAC of payload to dst.
func (sc *tokenScratch) sign(dst, payload []byte) []byte {
	sc.mac.Reset()
	sc.mac.Write(payload)
	return sc.mac.Sum(dst)
}

// Check verifies token for the route's endpoint and worker and returns when it expires. A token
// that is not one of ours, is forged, tampered with, expired or revoked is KindUnauthorized; a
// valid token of another endpoint or worker is KindForbidden; a revocation that cannot be looked
// up is KindUnavailable (the token is refused, not waved through).
func (t *WorkerTokens) Check(ctx context.Context, token, endpoint, worker string) (time.Time, error) {
	return t.check(ctx, token, endpoint, worker, t.clock.Now())
}

// check is Check at now (the caller's reading of the clock: reading it costs about 100 ns).
func (t *WorkerTokens) check(ctx context.Context, token, endpoint, worker string, now time.Time) (time.Time, error) {
	sc := t.scratch.Get().(*tokenScratch)
	exp, tokEndpoint, tokWorker, ok := sc.open(token)
	var mismatch bool
	var tokenOf string
	if ok {
		mismatch = string(tokEndpoint) != endpoint || string(tokWorker) != worker
		if mismatch { // copied out before the scratch goes back
			tokenOf = fmt.Sprintf("worker %s of endpoint %s", tokWorker, tokEndpoint)
		}
	}
	t.scratch.Put(sc)
	switch {
	case !ok:
		return time.Time{}, Errorf(KindUnauthorized, "unknown worker token")
	case !now.Before(exp):
		return exp, Errorf(KindUnauthorized, "the worker token expired at %s; the worker must be restarted to get a new one",
			exp.UTC().Format(time.RFC3339))
	case mismatch:
		return exp, Errorf(KindForbidden, "this worker token is for %s", tokenOf)
	}
	revoked, err := t.store.WorkerRevoked(ctx, worker)
	if err != nil {
		return exp, &Error{Kind: KindUnavailable, RetryAfter: 1, Detail: "the worker token's revocation cannot be checked now; retry",
			Err: err}
	}
	if revoked {
		return exp, Errorf(KindUnauthorized, "the worker token was revoked: worker %s was stopped", worker)
	}
	return exp, nil
}

// open decodes token into the scratch and checks its MAC; ok is false for anything not issued
// under the key. The ids returned are the scratch's: valid until it is reused.
func (sc *tokenScratch) open(token string) (exp time.Time, endpoint, worker []byte, ok bool) {
	text, found := strings.CutPrefix(token, WorkerTokenPrefix)
	if !found || len(text) > maxTokenText {
		return time.Time{}, nil, nil, false
	}
	n, err := tokenEncoding.Decode(sc.raw[:], sc.text[:copy(sc.text[:], text)])
	if err != nil || n < tokenHeaderLen+tokenMACLen || sc.raw[0] != tokenVersion {
		return time.Time{}, nil, nil, false
	}
	payload, mac := sc.raw[:n-tokenMACLen], sc.raw[n-tokenMACLen:n]
	if !hmac.Equal(sc.sign(sc.sum[:0], payload), mac) {
		return time.Time{}, nil, nil, false
	}
	epLen := int(payload[9])
	if tokenHeaderLen+epLen > len(payload) {
		return time.Time{}, nil, nil, false // signed by us, so never
	}
	exp = time.Unix(int64(binary.BigEndian.Uint64(payload[1:9])), 0)
	return exp, payload[tokenHeaderLen : tokenHeaderLen+epLen], payload[tokenHeaderLen+epLen:], true
}

// Revoke revokes every token of worker, in every replica.
func (t *WorkerTokens) Revoke(ctx context.Context, worker string) error {
	// A token issued now would expire at this bound: none issued before it outlives it.
	until := t.clock.Now().Add(WorkerTokenLife)
	if err := t.store.RevokeWorker(ctx, worker, until); err != nil {
		return fmt.Errorf("revoking the tokens of worker %s: %w", worker, err)
	}
	return nil
}

// memoryTokenStore is a WorkerTokenStore in this process's memory, the default of a Jobs
// configured without tokens: a restart forgets its key (and with it every token) and its
// revocations, which it never forgets otherwise. (store/memory has the one for tests.)
type memoryTokenStore struct {
	mu      sync.RWMutex
	secret  []byte
	revoked map[string]bool
}

func (m *memoryTokenStore) Secret(_ context.Context, _ string, fresh []byte) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.secret == nil { // NewWorkerTokens asks for one secret, once
		m.secret = append([]byte(nil), fresh...)
	}
	return m.secret, nil
}

func (m *memoryTokenStore) RevokeWorker(ctx context.Context, worker string, _ time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.revoked == nil {
		m.revoked = map[string]bool{}
	}
	m.revoked[worker] = true
	return nil
}

func (m *memoryTokenStore) WorkerRevoked(ctx context.Context, worker string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.revoked[worker], nil
}
