package fleet

import (
	"cmp"
	"hash/fnv"
	"slices"
)

// The assignment: every member computes, from the same view (the live
// members and who holds each partition's lease), what it alone does next.
// It never takes a partition someone holds (a lease is taken only when it
// is free), so members that disagree for a moment (one saw a member join
// that another did not) can only be slower to balance, never both own a
// partition.
//
// Targets: n live members share P partitions, so each owns ⌊P/n⌋ or
// ⌈P/n⌉. The P mod n larger shares go to the members that hold the most
// now, up to ⌈P/n⌉ (ties: the member id), so a balanced fleet has nothing
// to move and a member giving back what it holds above ⌈P/n⌉ keeps its
// larger share.
//
// Moves: a member below its target takes free partitions, a few a tick
// (step), in its own order of preference (a rendezvous hash of member and
// partition, so members starting together reach for different ones); a
// member above its target gives one partition back a tick, but only once no
// partition is free and some member is below its target (someone will take
// it). A free partition is taken at once by a member below its target or by
// the least loaded member; one that stays free for as long as a dead
// member's lease lives (the member below its target fails to take it) is
// taken by whoever sees it, so no partition stays unowned.

// plan is what one member does at a tick.
type plan struct {
	// release is a partition to give back (-1: none).
	release int
	// acquire are free partitions to take, in order.
	acquire []int
}

// view is what a plan is computed from.
type view struct {
	me      string
	members []string // the live members, me among them
	holders []string // holder of each partition's lease, "" when free
	// stale marks the free partitions that stayed free for as long as a
	// dead member's lease lives: any member may take one. A partition is
	// free only while some member is short of its target (the targets add
	// up to the partitions), whose the partition is: it may be busy
	// loading those it took before (Handler.Acquired) for a while, and a
	// partition taken from it meanwhile would move twice; one that stays
	// free that long is one the short member fails to take (its Handler
	// refuses it, its assignment is paused).
	stale []bool
	step  int // partitions taken a tick at most
}

// targets returns each live member's share of the partitions: ⌊P/n⌋,
// plus one for the P mod n members holding the most now.
func targets(members []string, holders []string) map[string]int {
	n := len(members)
	out := make(map[string]int, n)
	if n == 0 {
		return out
	}
	held := map[string]int{}
	for _, h := range holders {
		if h != "" {
			held[h]++
		}
	}
	// Holdings above the larger share count as the larger share: a
	// member giving back what it holds above it keeps its claim to it
	// whatever others' views, behind its releases, show it holds. (Ranked
	// by holdings alone, a member seeing its own releases at once and the
	// others' late gave itself the smaller share while they did the same:
	// both gave one back too many, and the newcomer took one more than
	// its share or an old member took one back.)
	p := len(holders)
	top := (p + n - 1) / n
	order := slices.Clone(members)
	slices.SortFunc(order, func(a, b string) int {
		if c := cmp.Compare(min(held[b], top), min(held[a], top)); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	for i, m := range order {
		out[m] = p / n
		if i < p%n {
			out[m]++
		}
	}
	return out
}

// decide computes v.me's plan.
func decide(v view) plan {
	pl := plan{release: -1}
	if !slices.Contains(v.members, v.me) {
		return pl
	}
	tg := targets(v.members, v.holders)
	held := map[string]int{}
	var mine, free []int
	for p, h := range v.holders {
		switch {
		case h == "":
			free = append(free, p)
		case h == v.me:
			mine = append(mine, p)
		}
		if h != "" {
			held[h]++
		}
	}
	want := tg[v.me]
	if len(free) > 0 {
		byPreference(v.me, free)
		switch {
		case len(mine) < want:
			pl.acquire = free[:min(len(free), max(v.step, 1), want-len(mine))]
		case leastLoaded(v.me, v.members, held):
			pl.acquire = free[:1]
		default:
			for _, p := range free {
				if p < len(v.stale) && v.stale[p] {
					pl.acquire = []int{p}
					break
				}
			}
		}
		return pl
	}
	if len(mine) <= want {
		return pl
	}
	for _, m := range v.members {
		if held[m] < tg[m] {
			// Someone is short: give back the partition this member
			// prefers least.
			byPreference(v.me, mine)
			pl.release = mine[len(mine)-1]
			return pl
		}
	}
	return pl
}

// leastLoaded says me holds the fewest partitions of the live members
// (ties: the smallest id).
func leastLoaded(me string, members []string, held map[string]int) bool {
	for _, m := range members {
		if held[m] < held[me] || held[m] == held[me] && m < me {
			return false
		}
	}
	return true
}

// byPreference sorts ps by member's preference, most preferred first: the
// rendezvous hash of member and partition.
func byPreference(member string, ps []int) {
	slices.SortFunc(ps, func(a, b int) int {
		if c := cmp.Compare(score(member, b), score(member, a)); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
}

// score is the rendezvous hash of member and partition.
func score(member string, p int) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(member))
	_, _ = h.Write([]byte{'/', byte(p), byte(p >> 8)})
	return mix64(h.Sum64())
}

// mix64 is murmur3's 64-bit finalizer: FNV-1a alone orders members nearly
// alike for every partition (the partition's bytes come last and barely
// move the high bits).
func mix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb3fe1a85ec53
	x ^= x >> 33
	return x
}
