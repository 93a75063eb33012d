package main

import (
	"runtime/debug"
	"testing"

	"github.com/rs/zerolog"
)

// memory_limit_mib becomes the runtime's soft memory limit; 0 leaves it,
// and so does GOMEMLIMIT in the environment.
func TestSetMemoryLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })

	t.Setenv("GOMEMLIMIT", "")
	setMemoryLimit(0, zerolog.Nop())
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Fatalf("limit %d after memory_limit_mib 0, want it left at %d", got, before)
	}
	setMemoryLimit(224, zerolog.Nop())
	if got := debug.SetMemoryLimit(-1); got != 224<<20 {
		t.Fatalf("limit %d, want 224 MiB", got)
	}
	debug.SetMemoryLimit(before)
	t.Setenv("GOMEMLIMIT", "1GiB")
	setMemoryLimit(224, zerolog.Nop())
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Fatalf("limit %d with GOMEMLIMIT set, want it left at %d", got, before)
	}
}
