package runtable

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Flow control: JetStream delivers a message again once consumer.ack_wait
// passed since it was delivered without an acknowledgement or a progress
// acknowledgement. A message waits in three places here, each kept well
// within the ack wait whatever the machine's load (on a loaded machine the
// time each takes grows many times over):
//
//   - pulled and not handed to the partition's handler yet: a partition
//     pulls once the messages of its last pull were handled, and asks for
//     no more than the handler is measured to handle in a quarter of the
//     ack wait (pullSize, from a moving average of the handler's wall time
//     a message, which counts the machine's load); those waiting longer
//     than progressAfter (a message before them waited for its run's
//     close, say) get a progress acknowledgement (Table.progress);
//   - in the handler's hand (waiting for its run while the run's close is
//     written, folding): its progress is acknowledged every progressAfter
//     (inHand);
//   - folded, waiting for the checkpoint that writes its run: every tenth
//     of the ack wait a goroutine of the table's own acknowledges the
//     progress of those that waited progressAfter, whatever a checkpoint
//     is doing (Table.progress; a checkpoint leaves them in the
//     partition's pending list until it acknowledges them).
//
// A progress acknowledgement is a message to the broker (and a write of
// the consumer's state on every replica): only a message that nears the
// ack wait gets one. One that waited 40 % of it is acknowledged at the
// latest half-way into it (the goroutine's tenth): half the ack wait is
// left for the acknowledgement to reach a loaded broker.

const (
	// initialHandle is a message's handling time before any was
	// measured.
	initialHandle = 5 * time.Millisecond
	// flowAlpha weighs a new measurement in the moving average.
	flowAlpha = 0.05
	// minPull is the least a pull asks for.
	minPull = 1
)

// flow is the table's flow control.
type flow struct {
	ackWait time.Duration
	maxPull int // pullBatch, or less with a smaller consumer.max_ack_pending
	// perMsg is the moving average of the handler's wall time a message
	// (nanoseconds).
	perMsg atomic.Int64
}

func newFlow(ackWait time.Duration, maxAck int) *flow {
	f := &flow{ackWait: ackWait, maxPull: max(min(maxAck, pullBatch), minPull)}
	f.perMsg.Store(int64(initialHandle))
	return f
}

// handled records a message handled in d.
func (f *flow) handled(d time.Duration) {
	old := float64(f.perMsg.Load())
	f.perMsg.Store(int64(old + flowAlpha*(float64(d)-old)))
}

// pullSize is how many messages one pull asks for: what the handler takes
// a quarter of the ack wait to handle, at the measured speed.
func (f *flow) pullSize() int {
	n := int64(f.ackWait/4) / max(f.perMsg.Load(), 1)
	return int(max(min(n, int64(f.maxPull)), minPull))
}

// progressAfter is how long a message waits before its progress is
// acknowledged, and progressEvery how often the waiting ones are looked
// at.
func (f *flow) progressAfter() time.Duration { return f.ackWait * 2 / 5 }
func (f *flow) progressEvery() time.Duration { return max(f.ackWait/10, 10*time.Millisecond) }

// inHand acknowledges jm's progress every progressAfter while it is
// handled; the returned function ends that, once it was handled.
func (f *flow) inHand(jm jetstream.Msg, progress func()) func() {
	var mu sync.Mutex
	stopped := false
	var tm *time.Timer
	mu.Lock()
	defer mu.Unlock()
	tm = time.AfterFunc(f.progressAfter(), func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		_ = jm.InProgress()
		progress()
		tm.Reset(f.progressAfter())
	})
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		tm.Stop()
	}
}

// pulled is a pull's messages not handed to the handler yet, in order.
type pulled struct {
	mu    sync.Mutex
	q     []pulledMsg
	ended bool
	ready chan struct{} // a message came, or the pull ended
}

type pulledMsg struct {
	jm jetstream.Msg
	at time.Time // when it came, or its progress was last acknowledged
}

// start begins a pull.
func (p *pulled) start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.q, p.ended, p.ready = p.q[:0], false, make(chan struct{}, 1)
}

func (p *pulled) signal() {
	select {
	case p.ready <- struct{}{}:
	default:
	}
}

// push adds a message of the pull.
func (p *pulled) push(jm jetstream.Msg) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.q = append(p.q, pulledMsg{jm: jm, at: time.Now()})
	p.signal()
}

// end says the pull brought all it will.
func (p *pulled) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended = true
	p.signal()
}

// pop returns the next message of the pull, waiting for it; nil once the
// pull ended and every message was taken.
func (p *pulled) pop() jetstream.Msg {
	for {
		p.mu.Lock()
		if len(p.q) > 0 {
			jm := p.q[0].jm
			p.q[0] = pulledMsg{}
			p.q = p.q[1:]
			p.mu.Unlock()
			return jm
		}
		ended, ready := p.ended, p.ready
		p.mu.Unlock()
		if ended {
			return nil
		}
		<-ready
	}
}

// progress acknowledges the progress of the messages that waited longer
// than after; it returns how many.
func (p *pulled) progress(now time.Time, after time.Duration) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for i := range p.q {
		if pm := &p.q[i]; now.Sub(pm.at) > after {
			_ = pm.jm.InProgress()
			pm.at = now
			n++
		}
	}
	return n
}

// progress acknowledges, every progressEvery until ctx ends, the progress
// of every pulled message not handled yet and of every folded message of
// the table's partitions that waited progressAfter for its checkpoint, so
// that it is not delivered again however long that checkpoint takes.
func (t *Table) progress(ctx context.Context) {
	tk := time.NewTicker(t.flow.progressEvery())
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		after := t.flow.progressAfter()
		for _, pt := range t.parts() {
			now := time.Now()
			pt.mu.Lock()
			for i := range pt.pending {
				if pm := &pt.pending[i]; now.Sub(pm.at) > after {
					_ = pm.ack.InProgress()
					pm.at = now
					t.m.progress.Inc()
				}
			}
			pt.mu.Unlock()
			for _, c := range pt.cons {
				t.m.progress.Add(float64(c.pulled.progress(now, after)))
			}
		}
	}
}
