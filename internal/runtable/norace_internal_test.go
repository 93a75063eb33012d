//go:build !race

package runtable

const raceEnabled = false
