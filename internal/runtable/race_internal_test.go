//go:build race

package runtable

// raceEnabled: the test binary runs under the race detector (several
// times slower; a heap measured on one goroutine gains nothing from it).
const raceEnabled = true
