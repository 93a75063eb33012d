//go:build race

package collector

// raceEnabled: the test binary runs under the race detector (everything,
// the embedded server included, is several times slower).
const raceEnabled = true
