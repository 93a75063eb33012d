// Package sinktest holds what sink tests share: Memory, an in-memory sink
// that records reports, Conformance, the suite every sink passes, Report,
// a filled-in report to write, and Buffer, for the logs of a sink's or a
// Fanout's goroutines.
package sinktest

import (
	"context"
	"sync"

	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// Memory is a sink that records every report it accepts. Tests can make
// its next writes fail (FailNext) or block (Block). The zero value is ready
// to use.
type Memory struct {
	mu       sync.Mutex
	reports  []split.Report
	attempts int
	fail     []error
	block    <-chan struct{}
	closed   bool
	closes   int
}

var _ sinks.Sink = (*Memory)(nil)

// Write records r, unless a FailNext error is pending (returned instead),
// ctx is done (ctx's error) or the sink is closed (sinks.ErrClosed). While a
// Block channel is set, Write first waits for it to be closed or for ctx.
func (m *Memory) Write(ctx context.Context, r split.Report) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	block := m.block
	m.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return sinks.ErrClosed
	}
	m.attempts++
	if len(m.fail) > 0 {
		err := m.fail[0]
		m.fail = m.fail[1:]
		if err != nil {
			return err
		}
	}
	m.reports = append(m.reports, r)
	return nil
}

// Close marks the sink closed. It is idempotent.
func (m *Memory) Close(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	m.closes++
	return nil
}

// FailNext makes the next len(errs) writes return errs in order (a nil entry
// lets that write succeed).
func (m *Memory) FailNext(errs ...error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fail = append(m.fail, errs...)
}

// Block makes writes wait until ch is closed (or their ctx is done); nil
// stops blocking.
func (m *Memory) Block(ch <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.block = ch
}

// Reports returns every accepted report, oldest first.
func (m *Memory) Reports() []split.Report {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]split.Report(nil), m.reports...)
}

// Runs returns the last accepted report of each run.
func (m *Memory) Runs() map[string]split.Report {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]split.Report)
	for _, r := range m.reports {
		out[r.Run.ID] = r
	}
	return out
}

// Attempts returns the number of writes that reached the sink while open,
// failed ones included.
func (m *Memory) Attempts() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.attempts
}

// Closed reports whether Close was called.
func (m *Memory) Closed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}
