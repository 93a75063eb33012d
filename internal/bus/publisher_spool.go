package bus

import (
	"errors"
	"time"
)

// The pump's spool side: failing over to the spool, draining it, going
// back to publishing directly, the run events a full disk holds back.
// Every method here runs under pump.mu.

// fullEpisode is a spool that refuses events (full, or its disk full),
// said once per episode: until the spool takes an event again.
type fullEpisode struct {
	on    bool   // the spool was full and has not accepted since
	drops uint64 // events dropped in this episode
}

// fill sends spooled events while the broker is connected, and the held
// run events once the spool is empty.
func (pm *pump) fill() {
	if pm.aborted || time.Now().Before(pm.nextTry) || !connected(pm.nc) {
		return
	}
	if len(pm.held) > 0 && pm.sp.empty() && len(pm.inflight) == 0 {
		// The disk is still full, the broker is there: send them
		// directly (a failure puts them back).
		held := pm.held
		pm.held = nil
		for i, e := range held {
			fut, err := pm.send(e.w)
			if err != nil {
				pm.held = append(pm.held, held[i:]...)
				pm.nextTry = time.Now().Add(pm.backoff)
				return
			}
			e.fut, e.okc, e.errc = fut, nil, nil
			pm.inflight = append(pm.inflight, e)
		}
		return
	}
	for len(pm.inflight) < pm.window {
		w, pos, ok := pm.sp.next()
		pm.n.corrupt.Store(uint64(pm.sp.corrupt))
		if !ok {
			break
		}
		fut, err := pm.send(w)
		switch {
		case err == nil:
			pm.inflight = append(pm.inflight, &entry{w: w, fut: fut, fromSp: true, pos: pos})
		case permanent(err):
			pm.inflight = append(pm.inflight, &entry{w: w, fromSp: true, pos: pos, dropped: err})
		default:
			pm.stopDrain(err)
			return
		}
	}
	if pm.sp.empty() && len(pm.inflight) == 0 && len(pm.held) == 0 {
		pm.backToDirect()
	}
}

// stopDrain forgets the spooled events in flight (they stay in the spool)
// and backs off before the next attempt.
func (pm *pump) stopDrain(err error) {
	pm.inflight = pm.inflight[:0]
	pm.window = 1
	pm.sp.rewind()
	pm.nextTry = time.Now().Add(pm.backoff)
	pm.log.Debug().Err(err).Dur("retry_in", pm.backoff.Round(time.Millisecond)).Msg("spool drain interrupted")
	pm.backoff = min(2*pm.backoff, maxRetryInterval)
}

// commit acknowledges spooled records up to pos.
func (pm *pump) commit(pos spoolPos) {
	if err := pm.sp.commit(pos); err != nil {
		pm.log.Error().Err(err).Msg("spool bookkeeping failed")
	}
	pm.n.spoolBytes.Store(pm.sp.bytes())
	if pm.spooling && pm.sp.empty() && len(pm.inflight) == 0 && len(pm.held) == 0 {
		pm.backToDirect()
	}
}

func (pm *pump) backToDirect() {
	pm.spooling = false
	pm.noStream = false
	pm.headErrs = 0
	pm.backoff = pm.cfg.RetryInterval
	pm.log.Info().Uint64("drained", pm.n.drained.Load()).Msg("spool drained, publishing directly")
}

// failover switches to spooling with one more entry after those in flight.
func (pm *pump) failover(e *entry, err error) {
	rest := pm.inflight
	pm.inflight = nil
	pm.failoverAll(append(rest, e), err)
}

// failoverAll writes entries (in order) to the spool and switches to
// spooling.
func (pm *pump) failoverAll(entries []*entry, err error) {
	pm.spooling = true
	pm.window = 1
	pm.nextTry = time.Now().Add(pm.backoff)
	pm.log.Warn().Err(err).Int("in_flight", len(entries)).Msg("broker unavailable, spooling events")
	pm.toSpool(entries)
}

// toSpool appends entries to the spool, after the held run events, syncs
// once, then acks them and releases the barriers among them, in order. A
// run event a full disk keeps out is held (see pump.held); a barrier is
// released all the same.
func (pm *pump) toSpool(entries []*entry) {
	if len(pm.held) > 0 {
		entries = append(pm.held[:len(pm.held):len(pm.held)], entries...)
		pm.held = nil
		pm.heldTry = time.Now()
	}
	written := make([]bool, len(entries))
	for i, e := range entries {
		if e.barrier != nil {
			continue
		}
		run := isRunEvent(e.w)
		err := pm.sp.append(e.w, run)
		switch {
		case err == nil:
			written[i] = true
			if pm.full.on {
				pm.full.on = false
				pm.log.Info().Uint64("dropped", pm.full.drops).Msg("spool accepts events again")
			}
		case errors.Is(err, errDiskFull) && run:
			pm.held = append(pm.held, e)
			pm.spoolRefused(err, false)
		case errors.Is(err, errSpoolFull), errors.Is(err, errDiskFull):
			pm.countDrop(e.w)
			pm.spoolRefused(err, true)
		default:
			pm.countDrop(e.w)
			pm.log.Error().Err(err).Str("id", Clip(e.w.ID, 256)).Msg("cannot spool event, dropped")
		}
	}
	if err := pm.sp.sync(); err != nil {
		// Not durable after all: do not ack (the source keeps its
		// position); a run event is held, the others are dropped.
		pm.log.Error().Err(err).Msg("cannot sync spool")
		for i := range written {
			if written[i] {
				written[i] = false
				if isRunEvent(entries[i].w) {
					pm.held = append(pm.held, entries[i])
				} else {
					pm.countDrop(entries[i].w)
				}
			}
		}
	}
	pm.n.spoolBytes.Store(pm.sp.bytes())
	for i, e := range entries {
		switch {
		case e.barrier != nil:
			pm.release(e.barrier)
		case written[i]:
			pm.n.spooled.Add(1)
			if e.ack != nil {
				pm.acks = append(pm.acks, e.ack)
			}
		}
	}
}

// spoolRefused counts an event the spool did not take (dropped, or a run
// event held) and says so once per episode: until the spool takes an
// event again.
func (pm *pump) spoolRefused(err error, dropped bool) {
	if dropped {
		pm.full.drops++
	}
	if pm.full.on {
		return
	}
	pm.full.on = true
	pm.full.drops = 0
	if dropped {
		pm.full.drops = 1
	}
	if errors.Is(err, errDiskFull) {
		pm.log.Warn().Err(err).Str("spool", pm.dir).
			Msg("spool disk full, dropping new events until there is room or the broker is back; run starts and finishes go to the spool's reserve, else are kept in memory")
		return
	}
	pm.log.Warn().Int64("max_bytes", pm.cfg.Spool.MaxBytes).
		Msg("spool full, dropping new events until the broker drains it")
}

// loseHeld runs when the pump returns: the held run events are tried on
// the spool a last time; those still held are lost, counted as dropped and
// said, each with its run.
func (pm *pump) loseHeld() {
	if len(pm.held) == 0 {
		return
	}
	pm.toSpool(nil)
	for _, e := range pm.held {
		pm.countDrop(e.w)
		pm.log.Error().Str("run_id", runOf(e.w)).Str("id", Clip(e.w.ID, 256)).
			Msg("a run's start or finish was neither delivered nor spooled (the spool's disk is full): that run is lost")
	}
	pm.held = nil
}

// abandon runs when Close's ctx ended: direct entries still in flight, and
// those handed over but not yet taken, go to the spool; spooled ones stay
// there.
func (pm *pump) abandon() {
	var direct []*entry
	for _, e := range pm.inflight {
		if !e.fromSp {
			direct = append(direct, e)
		}
	}
	pm.inflight = nil
	if !pm.inClosed {
		for e := range pm.in { // closed by Close before it aborts
			pm.queued--
			direct = append(direct, e)
		}
	}
	if len(direct) > 0 {
		pm.toSpool(direct)
	}
}
