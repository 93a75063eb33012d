//go:build race

package clitest

// raceEnabled is true when the tests are built with -race; the other binary
// is then built with -race too.
const raceEnabled = true
