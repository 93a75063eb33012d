package runtable

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Stopping: a stopping aggregator's run table first stops pulling on every
// partition at once (StopPulling: the message in a handler's hand is
// folded, those pulled and not handled go back to the stream), then writes
// what every partition holds, side by side (Drain: the partition is
// unpinned, so that its pulls standing at the broker are ended rather
// than served; a last checkpoint, the runs it finds due closed and their
// splits handed to the sinks, which are still open; what the checkpoint
// did not write goes back to the stream), and listens to its pulls until
// nothing the broker delivered to them is still on its way: what
// they bring after the stop is handed back as it comes, so that the next
// owner gets it at once, not an ack wait later (awaitPulls). All of it
// while its leases are still held. From then on a partition
// only records what the sinks settle (their pending markers purged) until
// it is handed over (Release, at once): nothing is closed or handed to the
// sinks any more, so nothing is left half done when the sinks close. What
// a stop did not write (its deadline passed) is its next owner's: the
// events not acknowledged are delivered to it again, the splits the sinks
// did not settle stay pending in the state bucket and are re-sent by it.

// StopPulling stops pulling on every partition owned, at once; it returns
// once each partition's handler let go of the message in its hand. The
// fleet member is frozen first (fleet.Member.Freeze): no partition comes
// or goes meanwhile.
func (t *Table) StopPulling() {
	t.stopping.Store(true)
	t.stop()
	var wg sync.WaitGroup
	for _, pt := range t.parts() {
		wg.Go(pt.stopConsumers)
	}
	wg.Wait()
}

// Drain writes what every partition owned holds, all partitions side by
// side, within ctx: a last checkpoint (the events it made durable are
// acknowledged, the others go back to the stream), then the runs due are
// closed and their splits handed to the sinks; then it waits until what
// the partitions' pulls brought after the stop was handed back. It calls
// StopPulling first if it was not. A write ctx cuts short is left to the
// partition's next owner (said at INFO, not as a failure); its events go
// back to the stream at once. Past ctx, the pulls are no longer listened
// to: what they bring later comes back an ack wait later.
func (t *Table) Drain(ctx context.Context) {
	t.StopPulling()
	var wg sync.WaitGroup
	for _, pt := range t.parts() {
		wg.Go(func() {
			pt.drain(ctx)
			pt.awaitPulls(ctx)
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.deafen()
	}
}

// drain is Drain for one partition.
func (pt *part) drain(ctx context.Context) {
	if pt.drained.Load() {
		return
	}
	pt.stopConsumers()
	// Its pulls still standing at the broker are ended (423) rather than
	// served, and what the stop hands back waits for the next owner
	// instead of coming back to them.
	pt.unpin(ctx)
	pt.stopLoop()
	pt.checkpoint(ctx, true, causeLast)
	if t := pt.t; t.lanePost != nil {
		deadline := time.Now().Add(releaseSettle)
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		t.lanePost.settle(pt.p, deadline)
	}
	pt.drained.Store(true)
	// Until Release: the sinks' deliveries recorded, nothing else.
	pt.t.drainMu.Lock()
	defer pt.t.drainMu.Unlock()
	if pt.t.part(pt.p) != pt {
		return // lost meanwhile
	}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tk := time.NewTicker(tickEvery)
		defer tk.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-tk.C:
			}
			pt.ckptMu.Lock()
			pt.settle(sctx)
			pt.ckptMu.Unlock()
		}
	}()
	if pt.t.settlers == nil {
		pt.t.settlers = map[*part]func(){}
	}
	pt.t.settlers[pt] = func() { stop(); <-done }
}

// stopSettling stops recording pt's deliveries after a drain (Release,
// Lost).
func (t *Table) stopSettling(pt *part) {
	t.drainMu.Lock()
	stop := t.settlers[pt]
	delete(t.settlers, pt)
	t.drainMu.Unlock()
	if stop != nil {
		stop()
	}
}

// stopCut says err is a write the stop's deadline cut short.
func (t *Table) stopCut(err error) bool {
	return t.stopping.Load() && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled))
}
