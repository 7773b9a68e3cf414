// Package redlock is the lock backend on N independent Redis nodes (Redlock): a lock is held
// when a majority of the nodes hold it, so the service keeps locking while a minority of the
// nodes is down. Three nodes tolerate one failure; five, the production setup, tolerate two.
//
// # Algorithm
//
// Every node keeps the single-Redis backend's layout (redislock.Layout): a hash {owner, count,
// fence, ttl} whose PEXPIRE is the lease, and fencing counters per Cluster slot that never
// expire. Every call to a node is one Lua script, sent to all nodes at once with a per-node
// timeout far below the ttl (Config.NodeTimeout, at most a tenth of the ttl), so a hung node
// costs one short timeout and never blocks the others, and a stopped one costs nothing.
//
//   - Acquire, round one: each node takes the key if free ("pending": fence 0, its att field
//     set to the attempt's random id, which stays the lease's identity), counts one more hold
//     on any lease of the same owner there (confirmed, or pending: a call of the owner between
//     another's two rounds counts on the lease being confirmed, so its counts include that
//     call once stamped), or changes nothing when another owner holds it. A re-entry extends
//     the node's expiry to the ttl when that is later and never shortens it, so a re-entry
//     that fails cannot cut its lease short. Each node reports its fencing counter. Round two,
//     for a new holder only: the token is the highest counter any node reported plus one; it
//     is written into this attempt's pending takes and the counter is raised to it, and the
//     lock counts as acquired only when a majority confirm it. The lease's validity is
//     ttl − elapsed − drift (drift = 1% of the ttl + 2 ms) measured from before round one;
//     the lease returned expires at start + validity, and an acquire whose validity is not
//     positive fails and gives back what it did.
//   - Re-entry needs a majority of nodes that counted the hold on the owner's newest
//     confirmed lease (same att); their token and count (the count a majority reaches) are
//     the answer. No node is ever rewritten with a count read elsewhere: counts change only
//     by +1 and −1, which commute, so every node that saw the same calls ends at the same
//     count however they interleaved (copying a count while calls are in flight made a
//     passing difference permanent, which is how concurrent re-entries once freed a held
//     lock). A node that lost the lease (restart, expiry) stays out of it; what the attempt
//     did there is given back. When fewer than a majority still know the owner, the old
//     lease is gone and the acquire is a new one: new token, count 1.
//   - Renew and Release succeed only on a majority of the owner's nodes. Renew returns the
//     validity as Acquire does, for the ttl a majority renewed for (its own ttl when asked
//     with 0). A node frees the key when its own count reaches 0.
//   - Inspect is a majority view: held only when a majority of nodes agree on the same owner.
//   - A lease's holder id is derived from its att (lock.HolderIDOf), the random id of the
//     attempt that took it, which every node of the lease keeps: every instance shows the
//     same id, and nothing about the owner (which the nodes keep only as the digest the
//     service passes) can be checked against it.
//   - The hold limit (lock.MaxHoldCount) is decided on the majority's count, not per node;
//     racing re-entries at the limit may pass it by those in flight, and counts are 64-bit on
//     the nodes and clamped in answers, so nothing wraps.
//
// Hold counts are exact under any concurrency of one owner while the nodes answer. A node
// that does not answer a re-entry may or may not have counted it; it keeps a count off by
// one on a minority, which the majority's answers outvote.
//
// # Failed attempts and mixed outcomes
//
// Whenever an acquire does not end acquired, it gives back exactly the holds it counted:
// on every node it took or re-entered, and on the ones that did not answer (a node may have
// taken the lock and lost the reply), it drops one hold of the lease it counted on, named by
// that lease's att, deleting the node's hash at 0. It never deletes a node that counts other
// calls' holds, and never touches another lease or another owner's lock. Then:
//
//   - fewer than a majority of nodes answered: it fails fast with lock.ErrUnavailable, and nobody
//     holds the lock;
//   - the owner's lease may stand on a majority counting the nodes that did not answer: also
//     lock.ErrUnavailable, since taking it anew would reset a live lease;
//   - a majority answered but fewer than a majority took it: the attempt is contended and
//     reports the holder seen on most nodes (its token, count and the time its majority lapses),
//     also when no other owner has a majority, as when two tries split the nodes: both back
//     off, and the service retries, as it does for any busy lock;
//   - the owner's own earlier acquire is still between its two rounds: contended, holder
//     itself; the retry re-enters once that acquire confirmed its token;
//   - a majority's count would pass lock.MaxHoldCount: lock.ErrHoldLimit;
//   - the second round, or the validity, failed: lock.ErrUnavailable.
//
// Renew and Release fail with lock.ErrUnavailable when the nodes that did not answer could have
// made a majority for the owner, and otherwise with lock.ErrNotOwner (other owners seen at least
// as often as free nodes) or lock.ErrNotHeld. A failed Renew or Release is not undone: an
// extended or decremented hold on a minority of nodes expires with its ttl and never forms a
// majority on its own.
//
// Known limits: a Release names no lease, so a release of the owner's last hold that races a
// re-acquire by the same owner across the moment the lock frees can take one hold off the new
// lease on a node; and a lease living on exactly a majority (a node was down when it was
// taken) loses exclusion if one more of its nodes drifts low or loses its data. The attacks
// that show both are in attack_open_test.go (build tag redlock_attack).
//
// # Fencing tokens
//
// A per-node INCR is not enough: the highest counter over one majority is not monotonic across
// majorities. Here a token is handed out only after the counter of the key's slot was raised
// to it on a majority of the nodes that still held this owner's lock at that moment; any later
// holder's majority shares a node with that one, and took the lock there (reading the same
// counter in the same script) only after this lease ended there, so it sees the token and goes
// above it. Tokens may skip values: a failed attempt may have raised counters already, and
// every key of a slot draws from one counter, which is what lets a free key leave no state.
//
// # Assumptions
//
// Redlock is safe only under these, which the operator must provide:
//
//   - The nodes are independent masters: no replication or failover between them (a promoted
//     replica may have missed the lock).
//   - No node loses its data on restart (appendonly yes with appendfsync always), or a node that
//     lost it stays down for at least the longest ttl in use before it rejoins ("延迟重启",
//     delayed restart), so that no lease still counts on what it forgot: each one has expired
//     or has been renewed on a majority without it. Delayed restarts
//     protect mutual exclusion but not fencing counters, which never expire: a node that
//     restarts empty learns the highest counter again the next time an acquire takes it, but a
//     token can repeat if it restarts empty while another node of the last majority is
//     unreachable. Use persistence where tokens must never repeat.
//   - Clocks of the nodes and of this process advance at nearly the same rate (the drift term
//     covers 1% of the ttl plus 2 ms), and are not stepped: Redis expires keys by wall clock.
//   - A holder that pauses (GC, swap) past its validity no longer holds the lock while it thinks
//     it does; the fencing token is what lets the protected resource reject its late writes.
package redlock
