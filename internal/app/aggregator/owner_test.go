package aggregator

import (
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"
)

// The rendezvous assignment spreads the partitions over the members: with
// 3 members of random ids and 16 partitions, the largest share averages
// close to what a fair random assignment gives (about 8), never the whole;
// and a member leaving moves only its own partitions.
func TestRendezvousSpreads(t *testing.T) {
	const trials, parts = 500, 16
	id := func() string {
		var b [8]byte
		_, _ = rand.Read(b[:])
		return "gttsplit-aggregator." + hex.EncodeToString(b[:])
	}
	sumMax, whole := 0, 0
	for range trials {
		members := []string{id(), id(), id()}
		n := map[string]int{}
		owner := map[int]string{}
		for p := range parts {
			owner[p] = rendezvous(p, members)
			n[owner[p]]++
		}
		most := 0
		for _, c := range n {
			most = max(most, c)
		}
		sumMax += most
		if most == parts {
			whole++
		}
		// members[0] leaves: the others keep what they had.
		for p := range parts {
			if owner[p] != members[0] {
				require.Equal(t, owner[p], rendezvous(p, members[1:]), "partition %d moved between live members", p)
			}
		}
	}
	avg := float64(sumMax) / trials
	t.Logf("largest share of 16 partitions among 3 members: %.2f on average; all 16 to one member in %d of %d trials", avg, whole, trials)
	require.Less(t, avg, 9.0, "the largest share averages near a fair assignment's")
	require.Less(t, whole, 3, "one member seldom takes every partition")
}
