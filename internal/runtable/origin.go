package runtable

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// Who an event speaks for, and when a run stops listening. The broker
// lets a host's credential publish only on its own host's subjects
// (internal/natsauth); the table checks again what the event says of
// itself (a boundary is enforced where it is crossed and again by who
// consumes):
//
//   - origin: the host, lane and run of an event (its CloudEvents source
//     and attributes, which Decode holds to each other) must be those its
//     subject names, and a run belongs to the host and lane of its first
//     event. Anything else is dead-lettered with reason origin, counted,
//     and said once per sending host and claimed source.
//   - final: a run closed complete (its finish folded, and every line and
//     sample the finish announced) is final. An event byte-identical to
//     one it folded is a duplicate (its fingerprint is among the run's
//     Digests); anything else (a line or sample it did not hold, one it
//     holds sent again with other bytes, a start or finish that differs)
//     is dead-lettered with reason final, and the split written stays the
//     split. A state an earlier version began keeps no fingerprints: it
//     tells a repeat by position, and a start or finish by the split it
//     would give. A run closed incomplete (the idle timeout) is not
//     final: a late event of its own host re-opens it, and its next close
//     replaces the split (and the tracker comment), saying so.

// errOrigin marks an event whose subject does not vouch for what it says
// it is (see originError).
var errOrigin = errors.New("origin")

// errFinal marks an event that would change a run closed complete.
var errFinal = errors.New("final")

// originError is an event refused for its origin: sent on the subject of
// host From, it says it is host Claimed's (source Source), or it names a
// run of another host or lane.
type originError struct {
	From, Claimed, Source string
	Why                   string
}

func (e *originError) Error() string {
	return fmt.Sprintf("%s: %s (published on host %s's subject, the event says source %s)", errOrigin, e.Why, e.From, e.Source)
}

func (e *originError) Is(target error) bool { return target == errOrigin }

// checkSubject holds an event to its subject: the host, lane and run
// tokens of the subject it was published on must be the event's.
func checkSubject(stored string, d events.Decoded) error {
	toks := strings.Split(bus.PublishedSubject(stored), ".")
	if len(toks) != 5 {
		return &originError{From: "?", Claimed: d.Origin.Host, Source: events.Source(d.Origin.Host),
			Why: fmt.Sprintf("subject %q is not an event subject", stored)}
	}
	from := toks[2]
	for _, f := range []struct{ what, tok, value string }{
		{"host", toks[2], d.Origin.Host}, {"lane", toks[3], d.Origin.Lane}, {"run", toks[4], d.Origin.RunID},
	} {
		if f.tok != events.Token(f.value) {
			return &originError{From: from, Claimed: d.Origin.Host, Source: events.Source(d.Origin.Host),
				Why: fmt.Sprintf("the event's %s %q is not the subject's %q", f.what, f.value, f.tok)}
		}
	}
	return nil
}

// checkOwner holds an event to its run: a run belongs to the host and
// lane of its first event.
func checkOwner(st *RunState, d events.Decoded) error {
	if o := st.Origin; o.Host != d.Origin.Host || o.Lane != d.Origin.Lane {
		return &originError{From: events.Token(d.Origin.Host), Claimed: d.Origin.Host, Source: events.Source(d.Origin.Host),
			Why: fmt.Sprintf("run %s is host %s's, lane %s, not host %s's, lane %s", o.RunID, o.Host, o.Lane, d.Origin.Host, d.Origin.Lane)}
	}
	return nil
}

// finalCheck says whether st's run is final (closed complete), and for a
// final run whether d, whose bytes have the fingerprint fp, is refused:
// nil for a re-send of an event the run folded (a duplicate, which folds
// nothing), errFinal for one that brings anything new or differs. opts
// are the fold's options (a state without fingerprints tries a repeated
// start or finish on a copy).
func finalCheck(st *RunState, d events.Decoded, fp func() uint64, opts split.Options) (final bool, err error) {
	if !st.complete() {
		return false, nil
	}
	refuse := func(what string) error {
		return fmt.Errorf("%w: run %s closed complete at %s and is final: the event (%s %s) %s; its split stays the one written",
			errFinal, st.Origin.RunID, st.ClosedAt.UTC().Format(time.RFC3339), d.Type, d.ID, what)
	}
	var held bool
	if st.Compact() {
		held = st.holds(d)
	} else {
		seen := st.Fold.Seen()
		held = seenHolds(&seen, d)
	}
	if !held {
		return true, refuse("brings what the run did not hold")
	}
	if st.Digests != nil {
		if !st.Digests.Has(fp()) {
			return true, refuse("is not byte for byte an event the run folded (what it says at positions the run holds differs)")
		}
		return true, nil
	}
	// A state an earlier version began: by position, and a start or
	// finish by the split it would give.
	if st.Compact() || (d.Started == nil && d.Finished == nil) {
		return true, nil // lines or a sample folded before: the fold ignores them
	}
	// A repeated start or finish replaces what the fold holds: it is a
	// repeat only if the split stays byte for byte the one written.
	c, err := cloneState(st, opts)
	if err != nil {
		return true, refuse(fmt.Sprintf("cannot be compared with the run's state (%v)", err))
	}
	ApplyTo(c, d)
	js, err := split.JSON(Report(c))
	if err != nil || string(js) != st.Reported {
		return true, refuse("differs from the one the run folded")
	}
	return true, nil
}

// originWarnings says each refused origin once per sending host and
// claimed source.
type originWarnings struct {
	// mu is taken last: no other lock is taken while it is held.
	mu   sync.Mutex
	said map[[2]string]bool
}

// say logs e unless it was said for its sender and source before.
func (w *originWarnings) say(log zerolog.Logger, e *originError, subject string) {
	w.mu.Lock()
	key := [2]string{e.From, e.Source}
	if w.said == nil || len(w.said) > 10_000 {
		w.said = map[[2]string]bool{}
	}
	first := !w.said[key]
	w.said[key] = true
	w.mu.Unlock()
	if first {
		log.Warn().Str("from_host", e.From).Str("source", e.Source).Str("subject", subject).Str("why", e.Why).
			Msg("an event that does not speak for its sender was dead-lettered (reason origin; said once per sender and source)")
	}
}
