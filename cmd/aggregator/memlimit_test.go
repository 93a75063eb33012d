package main

import (
	"runtime/debug"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/internal/app/aggregator"
)

// memory_limit_mib becomes the runtime's soft memory limit, less what the
// runtime does not manage (aggregator.GoMemoryLimit); 0 leaves it, and so
// does GOMEMLIMIT in the environment.
func TestSetMemoryLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })

	t.Setenv("GOMEMLIMIT", "")
	setMemoryLimit(0, zerolog.Nop())
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Fatalf("limit %d after memory_limit_mib 0, want it left at %d", got, before)
	}
	setMemoryLimit(224, zerolog.Nop())
	// What the runtime does not manage is read again: it may have grown.
	if got, want := debug.SetMemoryLimit(-1), aggregator.GoMemoryLimit(224); got < want || got > 224<<20-224<<20/8 || got < 112<<20 {
		t.Fatalf("limit %d, want about %d (within 112 MiB and 224 MiB less an eighth)", got, want)
	}
	debug.SetMemoryLimit(before)
	t.Setenv("GOMEMLIMIT", "1GiB")
	setMemoryLimit(224, zerolog.Nop())
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Fatalf("limit %d with GOMEMLIMIT set, want it left at %d", got, before)
	}
}
