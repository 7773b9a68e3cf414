package e2e

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// This file is the sequential specification the chaos tests check their recorded histories
// against, with porcupine, and the recorder that builds those histories.
//
// What is linearizable for a lease-based lock? Not "Acquire then Release": a lease can end by
// expiry, and its holder learns of that only from its own clock (the SDK's watchdog gives up
// at its Deadline: the last confirmed request's send time plus the granted span, minus a
// safety margin). So a lease is modelled by what its holder may act on: it is granted when
// Acquire returns, and it ends at its belief end, the first of the moment the holder called
// Unlock, the moment it saw Lost, and the SDK's Deadline. Between the two the holder runs its
// critical section against a separate linearizable register (a Redis hash on the shared server) whose writes
// are fenced: a write (token, seq) is applied only if it is above the last applied
// (token, seq) lexicographically, so each lease's writes have to be strictly increasing too.
//
// The model's state per key is the lock (who holds it, the highest token granted) and the
// register. Its operations:
//
//	acquire      -> token   legal when nobody holds the lock and token is above every earlier one
//	end(token)              legal when that lease holds; a zero-length operation at its belief end
//	write(t,s,v) -> applied  applied: (t,s) above the register's and lease t holds the lock;
//	                         refused: (t,s) not above the register's
//	read         -> (t,s,v) legal when equal to the register
//
// An acquire can be linearized only after the previous lease's end, so two leases whose
// belief intervals overlap make the history illegal, as do tokens that go backwards; a write
// made inside its lease cannot be refused, since only a later lease (after this one's end)
// can have written a higher token. A write still in flight at its lease's end may be refused
// (linearized after the next holder's write): that is the fencing token doing its job.

// lockOpKind is the kind of one operation of a lock history.
type lockOpKind uint8

const (
	lockOpAcquire lockOpKind = iota
	lockOpEnd
	lockOpWrite
	lockOpRead
)

// lockInput is an operation's input.
type lockInput struct {
	Kind  lockOpKind
	Key   string
	Token uint64 // end, write: the lease's token
	Seq   uint64 // write: the write's number within its lease, from 1
	Value int64  // write: the value written
}

// lockOutput is an operation's output.
type lockOutput struct {
	Token   uint64 // acquire: the token granted; read: the register's token
	Seq     uint64 // read: the register's seq
	Value   int64  // read: the register's value
	Applied bool   // write: whether the register took it
}

// lockState is the model's state of one key.
type lockState struct {
	Holder  uint64 // token of the lease holding the lock, 0 when free
	MaxTok  uint64 // highest token granted
	RegTok  uint64 // the register's (token, seq, value)
	RegSeq  uint64
	RegVal  int64
	Granted int // leases granted, for the visualization
}

// fencedAbove reports whether (t, s) is above (rt, rs): the register's guard.
func fencedAbove(t, s, rt, rs uint64) bool { return t > rt || t == rt && s > rs }

// lockModel is the porcupine model of a fenced lease lock with a guarded register,
// partitioned by key.
var lockModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(lockInput).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return lockState{} },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(lockState), input.(lockInput), output.(lockOutput)
		switch in.Kind {
		case lockOpAcquire:
			if st.Holder != 0 || out.Token <= st.MaxTok {
				return false, st
			}
			st.Holder, st.MaxTok = out.Token, out.Token
			st.Granted++
			return true, st
		case lockOpEnd:
			if st.Holder != in.Token {
				return false, st
			}
			st.Holder = 0
			return true, st
		case lockOpWrite:
			above := fencedAbove(in.Token, in.Seq, st.RegTok, st.RegSeq)
			if !out.Applied {
				return !above, st
			}
			if !above || st.Holder != in.Token {
				return false, st
			}
			st.RegTok, st.RegSeq, st.RegVal = in.Token, in.Seq, in.Value
			return true, st
		case lockOpRead:
			return out.Token == st.RegTok && out.Seq == st.RegSeq && out.Value == st.RegVal, st
		}
		return false, st
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(lockInput), output.(lockOutput)
		switch in.Kind {
		case lockOpAcquire:
			return fmt.Sprintf("acquire(%s) -> %d", in.Key, out.Token)
		case lockOpEnd:
			return fmt.Sprintf("end(%s, %d)", in.Key, in.Token)
		case lockOpWrite:
			return fmt.Sprintf("write(%s, %d.%d, %d) -> applied=%v", in.Key, in.Token, in.Seq, in.Value, out.Applied)
		default:
			return fmt.Sprintf("read(%s) -> %d.%d=%d", in.Key, out.Token, out.Seq, out.Value)
		}
	},
	DescribeState: func(state any) string {
		st := state.(lockState)
		return fmt.Sprintf("holder=%d max=%d reg=%d.%d=%d", st.Holder, st.MaxTok, st.RegTok, st.RegSeq, st.RegVal)
	},
}

// chaosLease is one granted lease as its holder saw it.
type chaosLease struct {
	Key      string
	Token    uint64
	Client   int
	Instance int           // index of the instance that granted it
	Called   time.Duration // when the holder called Lock (since the recorder's start)
	Start    time.Duration // when Lock returned it
	End      time.Duration // its belief end; 0 while held
	Planned  time.Duration // when the holder means to unlock it
	Expiry   time.Duration // the last expiry reported, set at its end
	Lost     bool          // the watchdog declared it lost
}

// chaosCall is one Lock call, for the liveness checks.
type chaosCall struct {
	Key      string
	Client   int
	Instance int
	Wait     time.Duration // the WithWait asked
	Called   time.Duration
	Returned time.Duration
	Outcome  string // "acquired", "busy" (ErrNotAcquired after the wait), "error", "stopped"
	Err      error
}

// lockRecorder collects a run's history from every client goroutine.
type lockRecorder struct {
	base time.Time

	mu     sync.Mutex
	ops    []porcupine.Operation
	leases []*chaosLease
	calls  []chaosCall
}

func newLockRecorder() *lockRecorder { return &lockRecorder{base: time.Now()} }

// since is t on the recorder's clock. A time with a monotonic reading (time.Now) is measured
// on the monotonic clock, a time decoded from the wire (an expiry) on the wall clock; both are
// on this one machine and the run lasts seconds, so they agree to microseconds.
func (r *lockRecorder) since(t time.Time) time.Duration { return t.Sub(r.base) }

func (r *lockRecorder) now() time.Duration { return time.Since(r.base) }

// op records a completed operation.
func (r *lockRecorder) op(client int, in lockInput, call time.Duration, out lockOutput, ret time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Input: in, Call: int64(call), Output: out, Return: int64(ret)})
}

// granted records a lease and its acquire operation.
func (r *lockRecorder) granted(l *chaosLease) {
	r.op(l.Client, lockInput{Kind: lockOpAcquire, Key: l.Key}, l.Called, lockOutput{Token: l.Token}, l.Start)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.leases = append(r.leases, l)
}

// ended records a lease's end at its belief end.
func (r *lockRecorder) ended(l *chaosLease, end, expiry time.Duration, lost bool) {
	r.mu.Lock()
	l.End, l.Expiry, l.Lost = end, expiry, lost
	r.mu.Unlock()
	r.op(l.Client, lockInput{Kind: lockOpEnd, Key: l.Key, Token: l.Token}, end, lockOutput{}, end)
}

// call records a Lock call.
func (r *lockRecorder) call(c chaosCall) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c)
}

// held returns the leases held now (no end recorded yet).
func (r *lockRecorder) held() []chaosLease {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []chaosLease
	for _, l := range r.leases {
		if l.End == 0 {
			out = append(out, *l)
		}
	}
	return out
}

// snapshot copies what was recorded.
func (r *lockRecorder) snapshot() (ops []porcupine.Operation, leases []chaosLease, calls []chaosCall) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ops = slices.Clone(r.ops)
	for _, l := range r.leases {
		leases = append(leases, *l)
	}
	return ops, leases, slices.Clone(r.calls)
}

// exclusionReport is what the direct checks over the leases found.
type exclusionReport struct {
	Overlaps     []string // pairs of leases of one key whose belief intervals overlap
	TokenReverse []string // leases granted after one with a higher (or equal) token
	MinGap       time.Duration
}

// checkExclusion checks the leases directly: per key, in grant order, each lease's belief
// interval ends before the next one is granted, and tokens strictly increase. MinGap is the
// smallest distance between one lease's end and the next's grant (negative on overlap).
func checkExclusion(leases []chaosLease) exclusionReport {
	rep := exclusionReport{MinGap: time.Duration(1<<63 - 1)}
	byKey := map[string][]chaosLease{}
	for _, l := range leases {
		byKey[l.Key] = append(byKey[l.Key], l)
	}
	for key, ls := range byKey {
		slices.SortFunc(ls, func(a, b chaosLease) int { return cmp.Compare(a.Start, b.Start) })
		for i := 1; i < len(ls); i++ {
			prev, cur := ls[i-1], ls[i]
			if cur.Token <= prev.Token {
				rep.TokenReverse = append(rep.TokenReverse, fmt.Sprintf("%s: token %d granted at %v after token %d granted at %v",
					key, cur.Token, cur.Start, prev.Token, prev.Start))
			}
			// Every earlier lease, not only the previous one: a long belief may span several.
			for _, p := range ls[:i] {
				if p.End > cur.Start {
					rep.Overlaps = append(rep.Overlaps, fmt.Sprintf("%s: token %d (client %d via instance %d) believed held [%v, %v], token %d (client %d via instance %d) granted at %v",
						key, p.Token, p.Client, p.Instance, p.Start, p.End, cur.Token, cur.Client, cur.Instance, cur.Start))
				}
			}
			rep.MinGap = min(rep.MinGap, cur.Start-prev.End)
		}
	}
	return rep
}

// porcupineTimeout bounds the linearizability check of one history; a history of a few
// thousand operations per key, mostly sequential, takes well under a second.
const porcupineTimeout = 30 * time.Second

// checkLinearizable runs porcupine over ops. On an illegal (or undecided) history it writes
// the visualization to a file that outlives the test and returns its path.
func checkLinearizable(t testing.TB, ops []porcupine.Operation) (porcupine.CheckResult, string) {
	t.Helper()
	res := porcupine.CheckOperationsTimeout(lockModel, ops, porcupineTimeout)
	if res == porcupine.Ok {
		return res, ""
	}
	_, info := porcupine.CheckOperationsVerbose(lockModel, ops, porcupineTimeout)
	dir, err := os.MkdirTemp("", "coordkit-chaos-")
	if err != nil {
		t.Errorf("porcupine visualization: %v", err)
		return res, ""
	}
	if raw, err := json.Marshal(ops); err == nil { // the raw history too, for replaying it
		os.WriteFile(filepath.Join(dir, "history.json"), raw, 0o644) //nolint:errcheck // best effort
	}
	path := filepath.Join(dir, "history.html")
	if err := porcupine.VisualizePath(lockModel, info, path); err != nil {
		t.Errorf("porcupine visualization: %v", err)
		return res, ""
	}
	return res, path
}

// lockHistory builds a history by hand for the model's own tests: times in milliseconds.
type lockHistory []porcupine.Operation

func (h *lockHistory) add(client int, in lockInput, call, ret int64, out lockOutput) {
	*h = append(*h, porcupine.Operation{ClientId: client, Input: in, Call: call * int64(time.Millisecond), Output: out, Return: ret * int64(time.Millisecond)})
}

func (h *lockHistory) acquire(client int, key string, call, ret int64, token uint64) {
	h.add(client, lockInput{Kind: lockOpAcquire, Key: key}, call, ret, lockOutput{Token: token})
}

func (h *lockHistory) end(client int, key string, at int64, token uint64) {
	h.add(client, lockInput{Kind: lockOpEnd, Key: key, Token: token}, at, at, lockOutput{})
}

func (h *lockHistory) write(client int, key string, call, ret int64, token, seq uint64, value int64, applied bool) {
	h.add(client, lockInput{Kind: lockOpWrite, Key: key, Token: token, Seq: seq, Value: value}, call, ret, lockOutput{Applied: applied})
}

func (h *lockHistory) read(client int, key string, call, ret int64, token, seq uint64, value int64) {
	h.add(client, lockInput{Kind: lockOpRead, Key: key}, call, ret, lockOutput{Token: token, Seq: seq, Value: value})
}

// TestChaosLockModel attacks the checker itself: the model must accept correct lease histories,
// including a fenced-off zombie write and concurrent waiters, and must reject two holders at
// once, a token that goes backwards, an unfenced stale write and a read of a lost write. A
// checker that cannot fail proves nothing.
func TestChaosLockModel(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		build func(h *lockHistory)
		legal bool
	}{
		{"two leases one after the other", func(h *lockHistory) {
			h.acquire(0, "k", 0, 10, 5)
			h.read(0, "k", 11, 12, 0, 0, 0)
			h.write(0, "k", 13, 14, 5, 1, 1, true)
			h.write(0, "k", 15, 16, 5, 2, 2, true)
			h.end(0, "k", 20, 5)
			h.acquire(1, "k", 5, 30, 7) // waited while 5 held; tokens may skip
			h.read(1, "k", 31, 32, 5, 2, 2)
			h.write(1, "k", 33, 34, 7, 1, 3, true)
			h.end(1, "k", 40, 7)
		}, true},
		{"zombie write in flight at its end is fenced off", func(h *lockHistory) {
			h.acquire(0, "k", 0, 10, 5)
			h.write(0, "k", 18, 60, 5, 1, 1, false) // called before its end, answered late: refused
			h.end(0, "k", 20, 5)
			h.acquire(1, "k", 5, 30, 6)
			h.write(1, "k", 31, 32, 6, 1, 1, true)
			h.end(1, "k", 40, 6)
		}, true},
		{"zombie write in flight at its end lands before the next holder writes", func(h *lockHistory) {
			h.acquire(0, "k", 0, 10, 5)
			h.write(0, "k", 18, 60, 5, 1, 1, true)
			h.end(0, "k", 20, 5)
			h.acquire(1, "k", 5, 30, 6)
			h.read(1, "k", 61, 62, 5, 1, 1)
			h.end(1, "k", 70, 6)
		}, true},
		{"keys are independent", func(h *lockHistory) {
			h.acquire(0, "a", 0, 10, 5)
			h.acquire(1, "b", 0, 10, 3)
			h.end(0, "a", 20, 5)
			h.end(1, "b", 20, 3)
		}, true},
		{"two holders at once", func(h *lockHistory) {
			h.acquire(0, "k", 0, 10, 5)
			h.write(0, "k", 11, 12, 5, 1, 1, true)
			h.acquire(1, "k", 5, 15, 6) // granted while 5 still believes it holds
			h.write(1, "k", 16, 17, 6, 1, 1, true)
			h.write(0, "k", 18, 19, 5, 2, 2, false) // 5's write inside its lease refused
			h.end(0, "k", 20, 5)
			h.end(1, "k", 40, 6)
		}, false},
		{"overlapping leases even without writes", func(h *lockHistory) {
			h.acquire(0, "k", 0, 10, 5)
			h.acquire(1, "k", 5, 15, 6)
			h.end(0, "k", 20, 5)
			h.end(1, "k", 40, 6)
		}, false},
		{"token goes backwards", func(h *lockHistory) {
			h.acquire(0, "k", 0, 10, 5)
			h.write(0, "k", 11, 12, 5, 1, 1, true)
			h.end(0, "k", 20, 5)
			h.acquire(1, "k", 25, 30, 4)
			h.write(1, "k", 31, 32, 4, 1, 2, false) // fenced off inside its own lease
			h.end(1, "k", 40, 4)
		}, false},
		{"stale write applied after a higher one", func(h *lockHistory) {
			h.acquire(0, "k", 0, 10, 5)
			h.end(0, "k", 20, 5)
			h.acquire(1, "k", 25, 30, 6)
			h.write(1, "k", 31, 32, 6, 1, 1, true)
			h.write(0, "k", 33, 34, 5, 1, 9, true) // a register without its guard
			h.end(1, "k", 40, 6)
		}, false},
		{"read misses an applied write", func(h *lockHistory) {
			h.acquire(0, "k", 0, 10, 5)
			h.write(0, "k", 11, 12, 5, 1, 1, true)
			h.read(0, "k", 13, 14, 0, 0, 0)
			h.end(0, "k", 20, 5)
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var h lockHistory
			tc.build(&h)
			res := porcupine.CheckOperationsTimeout(lockModel, h, 10*time.Second)
			if want := map[bool]porcupine.CheckResult{true: porcupine.Ok, false: porcupine.Illegal}[tc.legal]; res != want {
				t.Fatalf("porcupine says %v, want %v", res, want)
			}
			if tc.legal {
				return
			}
			// What a failing chaos row does: the visualization must be written.
			res, path := checkLinearizable(t, h)
			if res != porcupine.Illegal || path == "" {
				t.Fatalf("checkLinearizable: %v, visualization %q; want illegal and a file", res, path)
			}
			if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
				t.Fatalf("visualization %s: %v", path, err)
			}
			os.RemoveAll(filepath.Dir(path))
		})
	}
}

// TestChaosCheckExclusion: the direct checks find overlapping belief intervals and tokens that
// do not rise in grant order, and pass a clean handover.
func TestChaosCheckExclusion(t *testing.T) {
	t.Parallel()
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	clean := checkExclusion([]chaosLease{
		{Key: "k", Token: 5, Start: ms(10), End: ms(20)},
		{Key: "k", Token: 7, Start: ms(25), End: ms(40)},
		{Key: "j", Token: 1, Start: ms(12), End: ms(30)},
	})
	if len(clean.Overlaps)+len(clean.TokenReverse) != 0 || clean.MinGap != ms(5) {
		t.Fatalf("clean handover: %+v, want no violation and a 5ms gap", clean)
	}
	bad := checkExclusion([]chaosLease{
		{Key: "k", Token: 5, Start: ms(10), End: ms(50)},
		{Key: "k", Token: 4, Start: ms(20), End: ms(30)},
		{Key: "k", Token: 8, Start: ms(40), End: ms(60)},
	})
	if len(bad.Overlaps) != 2 || len(bad.TokenReverse) != 1 {
		t.Fatalf("overlapping leases and a reversed token: %+v, want 2 overlaps and 1 reversal", bad)
	}
}
