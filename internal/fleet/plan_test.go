package fleet

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sim runs the assignment over ticks: every member plans from the same
// true state, and the plans are applied in a random order (a take of a
// partition someone took first this tick fails, as a lease's create does).
type sim struct {
	holders []string
	members []string
	moves   int // acquisitions after the first full assignment
	rng     *rand.Rand
	stale   []int // ticks each partition has been free
}

func newSim(p int, seed uint64) *sim {
	return &sim{holders: make([]string, p), stale: make([]int, p), rng: rand.New(rand.NewPCG(seed, seed))}
}

func (s *sim) tick(t *testing.T, count bool) {
	t.Helper()
	order := slices.Clone(s.members)
	s.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	stale := make([]bool, len(s.holders))
	for p, n := range s.stale {
		stale[p] = n > 3
	}
	plans := map[string]plan{}
	for _, m := range order {
		plans[m] = decide(view{me: m, members: s.members, holders: slices.Clone(s.holders), stale: stale, step: 2})
	}
	for _, m := range order {
		pl := plans[m]
		if pl.release >= 0 {
			require.Equal(t, m, s.holders[pl.release], "releases only its own")
			s.holders[pl.release] = ""
		}
		for _, p := range pl.acquire {
			if s.holders[p] == "" {
				s.holders[p] = m
				if count {
					s.moves++
				}
			}
		}
	}
	for p, h := range s.holders {
		if h == "" {
			s.stale[p]++
		} else {
			s.stale[p] = 0
		}
	}
}

// balanced says every partition is held by a live member and the shares
// differ by at most one.
func (s *sim) balanced() bool {
	n := map[string]int{}
	for _, h := range s.holders {
		if h == "" || !slices.Contains(s.members, h) {
			return false
		}
		n[h]++
	}
	lo, hi := len(s.holders), 0
	for _, m := range s.members {
		lo, hi = min(lo, n[m]), max(hi, n[m])
	}
	return hi-lo <= 1
}

func (s *sim) settle(t *testing.T, count bool) int {
	t.Helper()
	for i := 1; i <= 200; i++ {
		s.tick(t, count)
		if s.balanced() {
			return i
		}
	}
	t.Fatalf("not balanced after 200 ticks: %v", s.holders)
	return 0
}

func TestTargetsBalanced(t *testing.T) {
	for n := 1; n <= 20; n++ {
		members := make([]string, n)
		for i := range members {
			members[i] = fmt.Sprintf("m%02d", i)
		}
		tg := targets(members, make([]string, 16))
		sum := 0
		for _, m := range members {
			require.True(t, tg[m] == 16/n || tg[m] == 16/n+1, "n=%d: %s gets %d", n, m, tg[m])
			sum += tg[m]
		}
		require.Equal(t, 16, sum, "n=%d", n)
	}
}

// Members that hold the most keep the larger shares: a balanced fleet of
// 3 (6/5/5) has nothing to move whoever holds the 6.
func TestTargetsKeepWhatIsBalanced(t *testing.T) {
	holders := make([]string, 16)
	for p := range holders {
		holders[p] = []string{"c", "a", "b"}[p%3] // c holds 6
	}
	for _, m := range []string{"a", "b", "c"} {
		pl := decide(view{me: m, members: []string{"a", "b", "c"}, holders: holders, step: 2})
		require.Equal(t, -1, pl.release, m)
		require.Empty(t, pl.acquire, m)
	}
}

// Three members starting together share 16 partitions 6/5/5 with no
// partition ever taken twice, and a fourth member joining moves exactly its
// share (4), a member leaving only its own.
func TestPlanConvergesAndMovesOnlyWhatMust(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		s := newSim(16, seed)
		s.members = []string{"a", "b", "c"}
		s.settle(t, false)
		s.members = append(s.members, "d")
		s.settle(t, true)
		require.Equal(t, 4, s.moves, "seed %d: a 4th member moves its share only", seed)

		// d leaves: its 4 partitions' leases expire and go to the others.
		s.moves = 0
		s.members = []string{"a", "b", "c"}
		for p, h := range s.holders {
			if h == "d" {
				s.holders[p] = ""
			}
		}
		s.settle(t, true)
		require.Equal(t, 4, s.moves, "seed %d: d's partitions only", seed)
	}
}

// lagSim is the assignment as members see it: each plans at its own turn
// from its own holdings as they are and the others' as its lease watch
// last delivered them (up to lag turns of the fleet late), and takes a
// partition only while it is free (a lease's create).
type lagSim struct {
	holders []string
	seen    [][]string // holders after each turn
	members []string
	lag     int
	moves   int
	rng     *rand.Rand
}

func (s *lagSim) turn(m string) {
	v := slices.Clone(s.seen[max(len(s.seen)-1-s.rng.IntN(s.lag+1), 0)])
	for p := range v {
		if v[p] == m || s.holders[p] == m {
			v[p] = s.holders[p] // its own: as they are
			if v[p] != m {
				v[p] = "" // given back; another's take not seen yet
			}
		}
	}
	pl := decide(view{me: m, members: s.members, holders: v, step: 2})
	if pl.release >= 0 {
		s.holders[pl.release] = ""
	}
	for _, p := range pl.acquire {
		if s.holders[p] == "" {
			s.holders[p] = m
			s.moves++
		}
	}
	s.seen = append(s.seen, slices.Clone(s.holders))
}

// A member joining a fleet moves exactly its share, however late each
// member sees the others' releases and takes (its own at once). Before,
// the larger shares went to whoever held the most as each member saw it:
// a member that had given back one saw the other, whose release it had
// not seen yet, hold more and gave itself the smaller share while the
// other did the same; both gave back one too many, and the newcomer or
// an old member took it (6 moves for 5, seen at load 4 and 28). Now
// holdings above the larger share count as the larger share.
func TestPlanMovesOnlyTheShareWhileViewsLag(t *testing.T) {
	for _, old := range []int{2, 3} {
		for seed := uint64(1); seed <= 300; seed++ {
			s := &lagSim{holders: make([]string, 16), lag: 5, rng: rand.New(rand.NewPCG(seed, uint64(old)))}
			for range old + 1 {
				s.members = append(s.members, fmt.Sprintf("%016x", s.rng.Uint64()))
			}
			for p := range s.holders {
				s.holders[p] = s.members[p%old] // balanced; the last one new
			}
			s.seen = [][]string{slices.Clone(s.holders)}
			for range 200 {
				s.turn(s.members[s.rng.IntN(len(s.members))])
			}
			share := 16 / (old + 1)
			require.True(t, (&sim{holders: s.holders, members: s.members}).balanced(), "seed %d: %v", seed, s.holders)
			require.Equal(t, share, s.moves, "%d old members, seed %d: the newcomer's share moves, nothing more: %v", old, seed, s.holders)
		}
	}
}

// A member that sees only itself at first (the others not seen yet) takes
// at most step partitions a tick, and hands back what it took too many.
func TestPlanFirstMemberTakesAFewATick(t *testing.T) {
	pl := decide(view{me: "a", members: []string{"a"}, holders: make([]string, 16), step: 2})
	require.Len(t, pl.acquire, 2)
	s := newSim(16, 7)
	s.members = []string{"a"}
	s.tick(t, false)
	s.tick(t, false)
	s.members = []string{"a", "b", "c"}
	s.settle(t, false)
	require.True(t, s.balanced())
}

// A free partition is taken even when every member able to is at its
// target: by the least loaded, or, when that is a member that does not
// take it (stuck), by anyone once it stayed free as long as a lease lives
// (stale).
func TestPlanNoPartitionStaysUnowned(t *testing.T) {
	// 5 live members for 5 partitions, one held by a dead member: a-d
	// hold theirs, e is short and the least loaded.
	holders := []string{"a", "b", "c", "dead", ""}
	members := []string{"a", "b", "c", "d", "e"}
	for _, m := range []string{"a", "b", "c"} {
		pl := decide(view{me: m, members: members, holders: holders, step: 2})
		require.Empty(t, pl.acquire, m)
	}
	pl := decide(view{me: "d", members: members, holders: holders, step: 2})
	require.Equal(t, []int{4}, pl.acquire, "d is short")
	// Every member at its target but the one holding nothing: 3 live,
	// 3 partitions, c stuck (never takes): a and b wait for the grace.
	holders = []string{"a", "b", ""}
	members = []string{"a", "b", "c"}
	require.Empty(t, decide(view{me: "a", members: members, holders: holders, step: 2}).acquire)
	stale := []bool{false, false, true}
	require.Equal(t, []int{2}, decide(view{me: "a", members: members, holders: holders, stale: stale, step: 2}).acquire,
		"a stale free partition: anyone")
	// With no one short, the least loaded takes a free one at once.
	holders = []string{"a", "a", "b", "b", "dead", ""}
	require.Equal(t, []int{5}, decide(view{me: "a", members: []string{"a", "b"}, holders: holders, step: 2}).acquire)
}

// A member above its target gives one back only when someone is short and
// nothing is free.
func TestPlanReleasesOnlyForSomeoneShort(t *testing.T) {
	holders := []string{"a", "a", "a", "a", "b", ""}
	pl := decide(view{me: "a", members: []string{"a", "b"}, holders: holders, step: 2})
	require.Equal(t, -1, pl.release, "a partition is free: b takes that first")
	holders[5] = "b"
	pl = decide(view{me: "a", members: []string{"a", "b"}, holders: holders, step: 2})
	require.GreaterOrEqual(t, pl.release, 0)
	require.Equal(t, "a", holders[pl.release])
	// b is at its target (3 of 6 with a holding 4: a gets 3 too): nothing
	// to give, a member not live is no one's target.
	pl = decide(view{me: "a", members: []string{"a", "b"}, holders: []string{"a", "a", "a", "b", "b", "b"}, step: 2})
	require.Equal(t, -1, pl.release)
}

// Members starting together reach for different partitions first.
func TestPreferenceSpreads(t *testing.T) {
	firsts := map[int]bool{}
	for i := 0; i < 8; i++ {
		ps := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
		byPreference(fmt.Sprintf("gttsplit-aggregator.%016x", uint64(i)*0x9e3779b97f4a7c15), ps)
		firsts[ps[0]] = true
	}
	require.GreaterOrEqual(t, len(firsts), 4, "8 members' first choices")
}

// Readiness does not flap on one slow heartbeat: a fault is reported only
// once it lasted missedBeats heartbeats, and clears at once.
func TestReportWaitsForSeveralBeats(t *testing.T) {
	m := &Member{set: Settings{Heartbeat: 20 * time.Millisecond}, faults: map[string]time.Duration{}}
	starting := "starting"
	m.why.Store(&starting)
	m.report(nil)
	ok, _ := m.Ready()
	require.True(t, ok)
	slow := map[string]string{"members": "members bucket: member key not renewed: timeout"}
	m.report(slow) // one slow heartbeat
	ok, _ = m.Ready()
	require.True(t, ok, "one slow heartbeat")
	m.report(nil)
	m.report(slow)
	time.Sleep(time.Duration(missedBeats) * m.set.Heartbeat)
	m.report(slow)
	ok, why := m.Ready()
	require.False(t, ok)
	require.Contains(t, why, "member key not renewed")
	m.report(nil)
	ok, _ = m.Ready()
	require.True(t, ok, "cleared at once")
}
