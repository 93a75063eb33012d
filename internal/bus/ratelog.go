package bus

import (
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// LogLimit lets through at most one log line per interval for one kind of
// event that can repeat at wire speed (a flood of poison messages), and
// counts the lines it held back; the next line let through carries that
// count as "suppressed". The zero value lets one line a second through.
type LogLimit struct {
	// Every is the interval (default one second).
	Every time.Duration

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// Event returns the event to write, with the count of lines held back
// since the last one, or nil (a no-op event) when this one is held back.
func (l *LogLimit) Event(ev func() *zerolog.Event) *zerolog.Event {
	every := l.Every
	if every <= 0 {
		every = time.Second
	}
	l.mu.Lock()
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < every {
		l.suppressed++
		l.mu.Unlock()
		return nil
	}
	n := l.suppressed
	l.last, l.suppressed = now, 0
	l.mu.Unlock()
	e := ev()
	if n > 0 {
		e = e.Int("suppressed", n)
	}
	return e
}

// Clip shortens s to at most n bytes (on a rune boundary), marking the cut
// with the number of bytes left out: for error texts that quote a hostile
// value (an id of megabytes) in a log line or a header.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && cut < len(s) && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…(" + strconv.Itoa(len(s)-cut) + " bytes cut)"
}
