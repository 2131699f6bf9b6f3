package memq

import (
	"cmp"
	"slices"
	"sort"
	"sync"

	"github.com/gantryhq/gantry/core"
)

// ixBlock is how many entries one block of a seqIndex holds at most (6 KiB).
const ixBlock = 256

// ixEntry is a job in a seqIndex: its Seq, shifted left one bit with the key's runsync mark
// (core.JobKey's last byte, 0 or 1) in the low bit, and the rest of its key. 24 bytes and no
// pointer, so that an index of a million jobs costs the garbage collector nothing to scan.
type ixEntry struct {
	m uint64
	k [16]byte
}

func newIxEntry(seq uint64, k core.JobKey) ixEntry {
	e := ixEntry{m: seq<<1 | uint64(k[16]&1)}
	copy(e.k[:], k[:16])
	return e
}

func (e ixEntry) seq() uint64 { return e.m >> 1 }

func (e ixEntry) key() core.JobKey {
	var k core.JobKey
	copy(k[:16], e.k[:])
	k[16] = byte(e.m & 1)
	return k
}

// seqIndex is a set of jobs ordered by Seq: blocks of at most ixBlock entries, each sorted,
// every entry of a block below those of the next. Jobs come nearly in Seq order (an insert
// appends at the tail, or a few places before it when inserts race), and leave mostly from
// the head (they expire in about the order they came), so most changes touch one block's end.
// A page of a list reads only its own entries: a binary search finds the cursor's place.
type seqIndex struct {
	blocks [][]ixEntry
	n      int
}

// block returns the index of the block where seq belongs: the last one whose first entry is
// at or below seq, or 0. There is at least one block.
func (x *seqIndex) block(seq uint64) int {
	i := sort.Search(len(x.blocks), func(i int) bool { return x.blocks[i][0].seq() > seq })
	return max(i-1, 0)
}

// add puts e in its place.
func (x *seqIndex) add(e ixEntry) {
	x.n++
	nb := len(x.blocks)
	if nb == 0 {
		x.blocks = append(x.blocks, append(make([]ixEntry, 0, 4), e)) // grows to ixBlock: a small list stays small
		return
	}
	if last := x.blocks[nb-1]; e.seq() > last[len(last)-1].seq() { // the usual case
		if len(last) < ixBlock {
			x.blocks[nb-1] = append(last, e)
		} else {
			x.blocks = append(x.blocks, append(make([]ixEntry, 0, ixBlock), e))
		}
		return
	}
	bi := x.block(e.seq())
	b := x.blocks[bi]
	i := sort.Search(len(b), func(i int) bool { return b[i].seq() > e.seq() })
	if len(b) < ixBlock {
		x.blocks[bi] = slices.Insert(b, i, e)
		return
	}
	half := len(b) / 2 // a full block splits in two
	lo := append(make([]ixEntry, 0, ixBlock), b[:half]...)
	hi := append(make([]ixEntry, 0, ixBlock), b[half:]...)
	if i <= half {
		lo = slices.Insert(lo, i, e)
	} else {
		hi = slices.Insert(hi, i-half, e)
	}
	x.blocks[bi] = lo
	x.blocks = slices.Insert(x.blocks, bi+1, hi)
}

// remove takes the entry of seq out; it reports whether there was one.
func (x *seqIndex) remove(seq uint64) bool {
	if len(x.blocks) == 0 {
		return false
	}
	bi := x.block(seq)
	b := x.blocks[bi]
	i, found := sort.Find(len(b), func(i int) int { return cmp.Compare(seq, b[i].seq()) })
	if !found {
		return false
	}
	x.n--
	switch {
	case i == 0:
		b = b[1:] // the head: most removals, and no copy
	case i == len(b)-1:
		b = b[:i]
	default:
		b = slices.Delete(b, i, i+1)
	}
	if len(b) == 0 {
		x.blocks = slices.Delete(x.blocks, bi, bi+1)
		return true
	}
	x.blocks[bi] = b
	// A block left nearly empty joins the next one when both fit in one, so that removals
	// in the middle do not leave many small blocks behind.
	if len(b) < ixBlock/4 && bi+1 < len(x.blocks) && len(b)+len(x.blocks[bi+1]) <= ixBlock {
		merged := append(append(make([]ixEntry, 0, ixBlock), b...), x.blocks[bi+1]...)
		x.blocks[bi] = merged
		x.blocks = slices.Delete(x.blocks, bi+1, bi+2)
	}
	return true
}

// below appends to out, newest first, up to n entries whose Seq is below before (0 = no
// bound), and returns it. It reads only the entries it returns, and a binary search's worth.
func (x *seqIndex) below(before uint64, n int, out []ixEntry) []ixEntry {
	if len(x.blocks) == 0 || n <= 0 {
		return out
	}
	bi := len(x.blocks) - 1
	i := len(x.blocks[bi]) - 1
	if before != 0 {
		if before <= x.blocks[0][0].seq() {
			return out
		}
		bi = x.block(before - 1)
		b := x.blocks[bi]
		i = sort.Search(len(b), func(i int) bool { return b[i].seq() >= before }) - 1
	}
	for stop := len(out) + n; len(out) < stop; {
		if i < 0 {
			if bi--; bi < 0 {
				break
			}
			i = len(x.blocks[bi]) - 1
			continue
		}
		out = append(out, x.blocks[bi][i])
		i--
	}
	return out
}

// lists are an endpoint's jobs by owner, each owner's live jobs (queued or running) and ended
// ones in a seqIndex each, for List: a page of one owner's jobs (a ready-made model's
// endpoint is shared by its users) or of the endpoint's (merged over its owners: one, on a
// user's own endpoint) reads only those jobs, and a status filter of live or of ended jobs
// reads only those. The lock is held for a few index operations at a time, never while a
// record is read.
type lists struct {
	mu sync.Mutex
	by map[string]*ownerLists
}

// ownerLists are one owner's jobs on an endpoint: live, then ended.
type ownerLists [2]seqIndex

// class is the list of a job in a state: 0 live, 1 ended.
func class(ended bool) int {
	if ended {
		return 1
	}
	return 0
}

// add indexes a job of owner.
func (l *lists) add(owner string, seq uint64, k core.JobKey, ended bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.addLocked(owner, newIxEntry(seq, k), ended)
}

func (l *lists) addLocked(owner string, e ixEntry, ended bool) {
	o := l.by[owner]
	if o == nil {
		if l.by == nil {
			l.by = map[string]*ownerLists{}
		}
		o = &ownerLists{}
		l.by[owner] = o
	}
	o[class(ended)].add(e)
}

// move moves a job of owner that ended (ended true) or was queued again after its end to
// the other list.
func (l *lists) move(owner string, seq uint64, k core.JobKey, ended bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if o := l.by[owner]; o != nil {
		o[class(!ended)].remove(seq)
	}
	l.addLocked(owner, newIxEntry(seq, k), ended)
}

// single reports whether the jobs indexed have at most one owner: then removing one needs
// no owner.
func (l *lists) single() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.by) <= 1
}

// remove drops a job, live or ended, from the index. With known false the owner is not
// known, and every owner's index is tried (the endpoint has one, but for a ready-made
// model's).
func (l *lists) remove(owner string, known bool, seq uint64, ended bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	drop := func(name string, o *ownerLists) bool {
		if !o[class(ended)].remove(seq) {
			return false
		}
		if o[0].n == 0 && o[1].n == 0 {
			delete(l.by, name)
		}
		return true
	}
	if known {
		if o := l.by[owner]; o != nil {
			drop(owner, o)
		}
		return
	}
	for name, o := range l.by {
		if drop(name, o) {
			return
		}
	}
}

// page appends to out, newest first, up to n entries whose Seq is below before (0 = no
// bound): owner's, or with owner "" every owner's; of live jobs, ended ones, or both.
func (l *lists) page(owner string, live, ended bool, before uint64, n int, out []ixEntry) []ixEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	from, parts := len(out), 0
	read := func(o *ownerLists) {
		if live {
			out = o[0].below(before, n, out)
			parts++
		}
		if ended {
			out = o[1].below(before, n, out)
			parts++
		}
	}
	if owner != "" {
		if o := l.by[owner]; o != nil {
			read(o)
		}
	} else {
		for _, o := range l.by {
			read(o)
		}
	}
	if parts > 1 { // n from each, then the newest n of them all
		got := out[from:]
		slices.SortFunc(got, func(a, b ixEntry) int { return cmp.Compare(b.seq(), a.seq()) })
		out = out[:from+min(n, len(got))]
	}
	return out
}
