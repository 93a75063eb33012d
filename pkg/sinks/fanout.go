package sinks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/rs/zerolog"
)

// Target is one named sink of a Fanout.
type Target struct {
	// Name identifies the sink in events, logs and errors (usually its
	// type, e.g. "issue_comment").
	Name string
	Sink Sink
}

// FanoutConfig tunes a Fanout. The zero value is usable.
type FanoutConfig struct {
	// Retry is the backoff between attempts; zero fields take
	// DefaultRetryPolicy's values.
	Retry RetryPolicy
	// Observer, if not nil, receives every attempt's outcome.
	Observer Observer
	// MaxPending caps the reports held in memory per sink (distinct runs:
	// a newer report of a queued run replaces it). When it is reached, a
	// new report is deferred if Reload is set (see there); otherwise, and
	// when MaxDeferred is reached too, the oldest queued report is dropped
	// with ErrQueueFull. Default 1024.
	MaxPending int
	// MaxPendingBytes caps, with Reload, what the reports held in memory
	// by every sink's queue take together, those an attempt has taken
	// included until it ends, counted by their JSON size (0:
	// no cap but MaxPending). A report that would pass it is deferred
	// like one past MaxPending: only its run id is kept, and it is
	// reloaded and written in its turn, so none is lost. Without Reload
	// there is nowhere to defer to, and only MaxPending holds.
	MaxPendingBytes int64
	// Reload, if set, lets a full queue defer reports instead of dropping
	// them: a deferred report keeps its place in the sink's queue (order
	// of arrival) but only its run id is held, and when its turn comes the
	// worker calls Reload for the run's report and writes what it returns.
	// Reload must return the run's latest report (a report of the run
	// given meanwhile leaves a deferred one deferred), or false when there
	// is nothing to write any more for that run (the report is then
	// withdrawn: OutcomeWithdrawn). An error is a transient failure of the
	// report (retried with the backoff). It is called from the sink's
	// worker goroutine, with ctx bounded by AttemptTimeout.
	Reload func(ctx context.Context, sink, runID string) (split.Report, bool, error)
	// MaxDeferred caps the deferred run ids per sink (with Reload); past
	// it the oldest queued report is dropped with ErrQueueFull. Default 64
	// times MaxPending.
	MaxDeferred int
	// Keep, if set, is asked right before a report is written (for a
	// BatchWriter, right before its batch commits) whether it is still to
	// be written; a report it refuses is withdrawn (OutcomeWithdrawn): its
	// run's partition moved to another aggregator, which writes it. It is
	// called from the sinks' worker goroutines.
	Keep func(split.Report) bool
	// Batch caps the reports a BatchWriter sink is handed at once (group
	// commit). Default 256.
	Batch int
	// AttemptTimeout bounds one Write call. Default 2m.
	AttemptTimeout time.Duration
	// Rand returns uniform numbers in [0, 1) for jitter; it is called from
	// several goroutines. Nil means math/rand/v2.Float64.
	Rand func() float64
}

// Fanout writes every report to several sinks, each independently: every
// sink has its own queue and goroutine, so a slow or failing sink never
// delays the others. Transient failures are retried with RetryPolicy;
// permanent ones drop the report for that sink. A report stays queued until
// it is delivered, fails permanently, is superseded by a newer report of the
// same run, or Close gives up; with FanoutConfig.Reload, a report that
// finds its sink's queue full is deferred (only its run id kept, reloaded
// in turn) rather than dropped.
//
// Fanout is itself a Sink: Write enqueues and returns at once.
type Fanout struct {
	cfg   FanoutConfig
	set   Settings
	log   zerolog.Logger
	ws    []*worker
	abort context.CancelFunc
	actx  context.Context // cancelled when Close gives up

	// mu guards closing against Write's enqueue. Lock order: mu, then a
	// worker's mu (Write holds mu for reading while it enqueues and tells
	// the Observer); mu must not be taken while a worker's mu is held.
	mu      sync.RWMutex
	closing bool
	// heldBytes is what the reports held in the sinks' queues take
	// (item.size summed; FanoutConfig.MaxPendingBytes).
	heldBytes atomic.Int64
	closeDone chan struct{}
	// deadline is Close's context's deadline (zero: none), set before the
	// workers drain: a wait the remote end asks for that ends after it is
	// not waited for.
	deadline time.Time
}

var _ Sink = (*Fanout)(nil)

// NewFanout starts one worker goroutine per target. The Fanout owns the
// targets: its Close closes them. Names must be unique and non-empty.
func NewFanout(set Settings, cfg FanoutConfig, targets ...Target) (*Fanout, error) {
	set = set.WithDefaults()
	cfg.Retry = cfg.Retry.withDefaults()
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = 1024
	}
	if cfg.MaxDeferred <= 0 {
		cfg.MaxDeferred = 64 * cfg.MaxPending
	}
	if cfg.Reload == nil {
		cfg.MaxDeferred, cfg.MaxPendingBytes = 0, 0
	}
	if cfg.AttemptTimeout <= 0 {
		cfg.AttemptTimeout = 2 * time.Minute
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 256
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	seen := make(map[string]bool, len(targets))
	for _, t := range targets {
		if t.Name == "" || t.Sink == nil {
			return nil, fmt.Errorf("sinks: fanout target %q has no name or sink", t.Name)
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("sinks: duplicate fanout target %q", t.Name)
		}
		seen[t.Name] = true
	}
	actx, abort := context.WithCancel(context.Background())
	f := &Fanout{
		cfg:       cfg,
		set:       set,
		log:       set.Logger.With().Str("component", "sinks").Logger(),
		abort:     abort,
		actx:      actx,
		closeDone: make(chan struct{}),
	}
	for _, t := range targets {
		w := &worker{
			f:      f,
			name:   t.Name,
			sink:   t.Sink,
			log:    f.log.With().Str("sink", t.Name).Logger(),
			queued: make(map[string]*item),
			latest: make(map[string]uint64),
			wake:   make(chan struct{}, 1),
			idle:   make(chan struct{}),
			done:   make(chan struct{}),
		}
		close(w.idle)
		w.idleClosed = true
		f.ws = append(f.ws, w)
	}
	for _, w := range f.ws {
		go w.run()
	}
	return f, nil
}

// Targets returns the names of the sinks f writes to, in order (none for
// a nil Fanout).
func (f *Fanout) Targets() []string {
	if f == nil {
		return nil
	}
	names := make([]string, len(f.ws))
	for i, w := range f.ws {
		names[i] = w.name
	}
	return names
}

// Write queues r for every sink and returns without waiting for delivery.
// It fails only when ctx is done or the Fanout is closed (ErrClosed).
func (f *Fanout) Write(ctx context.Context, r split.Report) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closing {
		return ErrClosed
	}
	size := f.sizeOf(r)
	for _, w := range f.ws {
		w.enqueue(r, size)
	}
	return nil
}

// sizeOf is what r is counted against MaxPendingBytes: its JSON size (0
// when there is no such cap).
func (f *Fanout) sizeOf(r split.Report) int64 {
	if f.cfg.MaxPendingBytes <= 0 {
		return 0
	}
	b, err := json.Marshal(r)
	if err != nil {
		return 0
	}
	return int64(len(b))
}

// HeldBytes is what the reports held in the sinks' queues take, counted
// as FanoutConfig.MaxPendingBytes counts them (0 without that cap).
func (f *Fanout) HeldBytes() int64 {
	if f == nil {
		return 0
	}
	return f.heldBytes.Load()
}

// Flush waits until every queued report (deferred ones included) has been
// delivered, has failed permanently or was withdrawn, or until ctx is done.
// Then it returns ctx's error joined with, for each sink still holding
// reports, how many and its last failure (ErrUndelivered); the reports
// stay queued. With a sink that keeps failing transiently, only ctx ends
// the wait.
func (f *Fanout) Flush(ctx context.Context) error {
	for _, w := range f.ws {
		for {
			w.mu.Lock()
			if len(w.queue) == 0 && !w.busy {
				w.mu.Unlock()
				break
			}
			ch := w.idle
			w.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return f.waiting(ctx.Err())
			}
		}
	}
	return nil
}

// waiting joins cause with each sink's queued reports and last failure.
func (f *Fanout) waiting(cause error) error {
	errs := []error{cause}
	for _, w := range f.ws {
		w.mu.Lock()
		n, why := len(w.queue), undeliveredError{last: w.lastErr}
		w.mu.Unlock()
		if n > 0 {
			errs = append(errs, fmt.Errorf("%s: %s %w", w.name, reports(n), why))
		}
	}
	return errors.Join(errs...)
}

// Pending returns the number of reports queued (deferred ones included) or
// being written, per sink.
func (f *Fanout) Pending() map[string]int {
	m := make(map[string]int, len(f.ws))
	for _, w := range f.ws {
		w.mu.Lock()
		n := len(w.queue)
		if w.busy {
			n++
		}
		m[w.name] = n
		w.mu.Unlock()
	}
	return m
}

// Deferred returns the number of deferred reports (see FanoutConfig.Reload)
// queued, per sink.
func (f *Fanout) Deferred() map[string]int {
	m := make(map[string]int, len(f.ws))
	for _, w := range f.ws {
		w.mu.Lock()
		m[w.name] = w.deferred
		w.mu.Unlock()
	}
	return m
}

// Close stops accepting reports, cuts short every backoff wait so each
// pending report gets an immediate attempt, and keeps retrying until every
// queue is empty or ctx is done. Then it cancels what is in flight, reports
// what is still queued as dropped (ErrUndelivered) and closes every sink.
// The error joins ctx's error (when it ended the drain), the undelivered
// counts and the sinks' Close errors. Later calls wait for the first to
// finish and return nil.
func (f *Fanout) Close(ctx context.Context) error {
	f.mu.Lock()
	if f.closing {
		f.mu.Unlock()
		select {
		case <-f.closeDone:
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	f.closing = true
	f.deadline, _ = ctx.Deadline()
	f.mu.Unlock()
	defer close(f.closeDone)

	for _, w := range f.ws {
		w.mu.Lock()
		w.draining = true
		if w.sleepCancel != nil {
			w.sleepCancel()
		}
		w.mu.Unlock()
		w.signal()
	}
	allDone := make(chan struct{})
	go func() {
		for _, w := range f.ws {
			<-w.done
		}
		close(allDone)
	}()
	var errs []error
	select {
	case <-allDone:
	case <-ctx.Done():
		select {
		case <-allDone: // drained just in time
		default:
			f.abort() // sinks honour ctx: in-flight writes and waits return
			<-allDone
			errs = append(errs, fmt.Errorf("delivery cut short: %w", ctx.Err()))
		}
	}
	f.abort()

	for _, w := range f.ws {
		w.mu.Lock()
		left := w.queue
		for _, it := range left {
			if it.held {
				f.heldBytes.Add(-it.size)
			}
		}
		w.queue, w.queued = nil, nil
		w.held, w.deferred = 0, 0
		why := undeliveredError{last: w.lastErr}
		w.mu.Unlock()
		for _, it := range left {
			w.observe(Event{Sink: w.name, RunID: it.run, Outcome: OutcomeDropped, Attempt: it.attempts, Err: why})
		}
		if len(left) > 0 {
			// The sink's last failure ends the line, so the last line of a
			// one-shot command says why (a 500, a refused token).
			errs = append(errs, fmt.Errorf("%s: %s %w", w.name, reports(len(left)), why))
		}
	}
	cerrs := make([]error, len(f.ws))
	var wg sync.WaitGroup
	for i, w := range f.ws {
		wg.Go(func() {
			if err := w.sink.Close(ctx); err != nil {
				cerrs[i] = fmt.Errorf("close sink %s: %w", w.name, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(append(errs, cerrs...)...)
}

// item is one report queued for one sink.
type item struct {
	r split.Report
	// held says r is the report; when not, the report was deferred (only
	// its run id is kept) and is reloaded when its turn comes.
	held bool
	// loaded: a deferred report reloaded for the attempt in progress.
	loaded bool
	// size is what the held report is counted (Fanout.heldBytes) while
	// the item is queued.
	size     int64
	run      string
	version  uint64
	attempts int
}

// worker owns the queue and goroutine of one sink.
type worker struct {
	f    *Fanout
	name string
	sink Sink
	log  zerolog.Logger

	// mu is taken after the Fanout's mu, and no other lock is taken
	// while it is held: the Observer, Keep, Reload and the sink are
	// called without it.
	mu          sync.Mutex
	queue       []*item          // waiting, oldest first
	queued      map[string]*item // run id → its waiting item
	held        int              // items of queue holding their report
	deferred    int              // items of queue that do not (deferred)
	reloaded    int              // deferred reports reloaded since the queue last had none
	drops       int              // reports dropped at a full queue
	latest      map[string]uint64
	seq         uint64
	busy        bool // an item is being written or waited on
	draining    bool
	sleepCancel context.CancelFunc
	idle        chan struct{} // closed while the queue is empty and !busy
	idleClosed  bool

	lastErr error // the last failed attempt's error

	wake          chan struct{}
	done          chan struct{}
	failures      int // consecutive transient failures; worker goroutine only
	drainFailures int // transient failures since Close began; worker goroutine only
}

const (
	// warnEvery: the first failure of a streak and every warnEvery-th are
	// logged at WARN, the others at DEBUG.
	warnEvery = 10
	// maxDrainFailures is how many transient failures a sink may have
	// while Close drains before its remaining reports count as undelivered.
	maxDrainFailures = 3
	// maxDrainDelay caps the backoff while Close drains.
	maxDrainDelay = time.Second
	// warnDropsEvery: the first report a sink drops at a full queue and
	// every warnDropsEvery-th after it are logged at WARN, the others at
	// DEBUG (each is observed).
	warnDropsEvery = 1000
)

func (w *worker) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *worker) observe(e Event) {
	if w.f.cfg.Observer != nil {
		w.f.cfg.Observer.Observe(e)
	}
}

// enqueue queues r, replacing a waiting report of the same run. A report
// of a new run that finds MaxPending reports held is deferred (with
// Reload); when the queue is full (MaxPending, plus MaxDeferred with
// Reload), its oldest report is dropped.
func (w *worker) enqueue(r split.Report, size int64) {
	cfg := &w.f.cfg
	var dropped *item
	drops := 0
	deferred, streak := false, false
	w.mu.Lock()
	w.seq++
	run := r.Run.ID
	w.latest[run] = w.seq
	if it, ok := w.queued[run]; ok {
		it.version, it.attempts = w.seq, 0
		switch {
		case it.held:
			it.r = r
			w.f.heldBytes.Add(size - it.size)
			it.size = size
		case w.room(size):
			it.r, it.held, it.size = r, true, size
			w.held++
			w.deferred--
			w.f.heldBytes.Add(size)
		}
		// Otherwise it stays deferred: Reload gives the run's latest report.
	} else {
		if len(w.queue) >= cfg.MaxPending+cfg.MaxDeferred {
			dropped = w.queue[0]
			w.queue = w.queue[1:]
			w.drops++
			drops = w.drops
			w.unqueue(dropped, false)
			if w.latest[dropped.run] == dropped.version {
				delete(w.latest, dropped.run)
			}
		}
		it := &item{run: run, version: w.seq}
		if w.room(size) {
			it.r, it.held, it.size = r, true, size
			w.held++
			w.f.heldBytes.Add(size)
		} else {
			deferred, streak = true, w.deferred == 0
			w.deferred++
		}
		w.queue = append(w.queue, it)
		w.queued[run] = it
	}
	if w.idleClosed {
		w.idle = make(chan struct{})
		w.idleClosed = false
	}
	w.mu.Unlock()
	w.signal()
	if dropped != nil {
		ev := w.log.Debug()
		if drops%warnDropsEvery == 1 {
			ev = w.log.Warn().Int("dropped", drops)
		}
		msg := "report dropped: the sink's queue is full"
		if cfg.Reload != nil {
			msg = "report dropped: the sink's queue and its deferred reports are full; the observer is told, to send it again"
		}
		ev.Str("run_id", dropped.run).Int("max_pending", cfg.MaxPending).Int("max_deferred", cfg.MaxDeferred).
			Err(ErrQueueFull).Msg(msg)
		w.observe(Event{Sink: w.name, RunID: dropped.run, Outcome: OutcomeDropped, Attempt: dropped.attempts, Err: ErrQueueFull})
	}
	if deferred {
		ev := w.log.Debug()
		if streak {
			ev = w.log.Warn().Int("max_pending", cfg.MaxPending)
		}
		ev.Str("run_id", run).Err(ErrQueueFull).Msg("sink slower than reports come: reports are deferred (only their run ids kept) and reloaded in their turn, not lost")
		w.observe(Event{Sink: w.name, RunID: run, Outcome: OutcomeDeferred, Err: ErrQueueFull})
	}
}

// room says a report of size bytes may be held in the queue: MaxPending
// reports are not held yet, nor MaxPendingBytes. w.mu is held.
func (w *worker) room(size int64) bool {
	cfg := &w.f.cfg
	return w.held < cfg.MaxPending && (cfg.MaxPendingBytes <= 0 || w.f.heldBytes.Load()+size <= cfg.MaxPendingBytes)
}

// unqueue accounts for it leaving the queue: dropped, or taken for an
// attempt (taken), whose report stays in memory, counted in heldBytes,
// until settle. w.mu is held.
func (w *worker) unqueue(it *item, taken bool) {
	delete(w.queued, it.run)
	if it.held {
		w.held--
		if !taken {
			w.f.heldBytes.Add(-it.size)
		}
	} else {
		w.deferred--
	}
}

// next takes the oldest waiting items, up to n, blocking until there is
// one. It returns nil when the worker must stop: draining with an empty
// queue, or aborted.
func (w *worker) next(n int) []*item {
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		if w.f.actx.Err() != nil {
			return nil
		}
		if len(w.queue) > 0 {
			k := min(max(n, 1), len(w.queue))
			its := append([]*item(nil), w.queue[:k]...)
			w.queue = w.queue[k:]
			for _, it := range its {
				w.unqueue(it, true)
			}
			w.busy = true
			return its
		}
		if w.draining {
			return nil
		}
		w.mu.Unlock()
		select {
		case <-w.wake:
		case <-w.f.actx.Done():
		}
		w.mu.Lock()
	}
}

// settle ends an item taken by next: it is requeued at the back when
// requeue is set and no newer report of its run arrived meanwhile. A
// reloaded report keeps its body if MaxPending and MaxPendingBytes allow,
// else it is deferred
// again. last says it is the last item of what next returned.
func (w *worker) settle(it *item, requeue, last bool) {
	redeferred := false
	var size int64
	if requeue && it.loaded {
		size = w.f.sizeOf(it.r)
	}
	w.mu.Lock()
	if last {
		w.busy = false
	}
	if it.held {
		// Its report, in memory since next took it, leaves it now; held
		// again below if it is requeued.
		w.f.heldBytes.Add(-it.size)
	}
	current := w.latest[it.run] == it.version
	switch {
	case requeue && current:
		if it.loaded && w.room(size) {
			it.held, it.size = true, size
		}
		if it.held {
			w.held++
			w.f.heldBytes.Add(it.size)
		} else {
			redeferred = it.loaded
			it.r, it.size = split.Report{}, 0 // reloaded again in its turn
			w.deferred++
		}
		w.queue = append(w.queue, it)
		w.queued[it.run] = it
	case current:
		delete(w.latest, it.run)
	}
	it.loaded = false
	if last && len(w.queue) == 0 && !w.idleClosed {
		close(w.idle)
		w.idleClosed = true
	}
	w.mu.Unlock()
	if redeferred {
		w.observe(Event{Sink: w.name, RunID: it.run, Outcome: OutcomeDeferred, Attempt: it.attempts, Err: ErrQueueFull})
	}
}

func (w *worker) run() {
	defer close(w.done)
	batch := 1
	if _, ok := w.sink.(BatchWriter); ok {
		batch = w.f.cfg.Batch
	}
	for {
		its := w.next(batch)
		if its == nil {
			return
		}
		for _, it := range its {
			it.attempts++
		}
		outs := w.attempt(its)
		// The outcomes are observed before the items are settled: Flush
		// and Close return once every item is settled, and by then every
		// observer must have seen what happened to it.
		var delay time.Duration
		stop := false
		for i, it := range its {
			last := i == len(its)-1
			if stop {
				w.settle(it, true, last) // Close counts it as undelivered
				continue
			}
			d, halt := w.outcome(it, outs[i], last)
			delay, stop = max(delay, d), halt
		}
		if stop {
			return
		}
		if delay > 0 {
			w.wait(delay)
		}
	}
}

// result is what one attempt did with one item.
type result struct {
	withdrawn bool
	err       error
}

// outcome observes and settles one item after its attempt; it returns the
// backoff before the next attempt (0: none), and whether the worker must
// stop.
func (w *worker) outcome(it *item, res result, last bool) (time.Duration, bool) {
	err := res.err
	switch {
	case res.withdrawn:
		w.log.Debug().Str("run_id", it.run).Msg("report withdrawn: nothing to write for the run here any more")
		w.observe(Event{Sink: w.name, RunID: it.run, Outcome: OutcomeWithdrawn, Attempt: it.attempts})
		w.settle(it, false, last)
	case err == nil:
		if w.failures > 0 {
			w.log.Info().Int("failures", w.failures).Msg("writes succeed again")
		}
		w.failures = 0
		w.observe(Event{Sink: w.name, RunID: it.run, Outcome: OutcomeDelivered, Attempt: it.attempts})
		w.settle(it, false, last)
	case IsPermanent(err):
		w.setLastErr(err)
		w.log.Warn().Str("run_id", it.run).Int("attempt", it.attempts).Err(err).Msg("report dropped on permanent error")
		w.observe(Event{Sink: w.name, RunID: it.run, Outcome: OutcomeFailed, Attempt: it.attempts, Err: err})
		w.settle(it, false, last)
	case w.f.actx.Err() != nil:
		w.settle(it, true, last) // Close counts it as undelivered
		return 0, true
	default:
		w.setLastErr(err)
		w.failures++
		w.mu.Lock()
		draining := w.draining
		w.mu.Unlock()
		if draining {
			w.drainFailures++
		}
		if draining && w.drainFailures >= maxDrainFailures {
			// Shutting down and the sink keeps failing: stop here; Close
			// reports what is left as undelivered at once instead of
			// retrying until the shutdown timeout.
			w.log.Warn().Str("run_id", it.run).Int("attempt", it.attempts).Err(err).
				Msg("write failed while shutting down; giving up on this sink")
			w.settle(it, true, last)
			return 0, true
		}
		delay := w.f.cfg.Retry.Delay(err, w.failures, w.f.cfg.Rand())
		_, asked := RetryAfterDelay(err)
		if draining && asked && !w.f.deadline.IsZero() && w.f.set.Now().Add(delay).After(w.f.deadline) {
			// The remote end asks for a wait that ends after the
			// shutdown deadline: give up now rather than at it.
			w.log.Warn().Str("run_id", it.run).Int("attempt", it.attempts).Dur("retry_in", delay.Round(time.Millisecond)).Err(err).
				Msg("write failed while shutting down, and the remote end asks to wait past the deadline; giving up on this sink")
			w.settle(it, true, last)
			return 0, true
		}
		if draining && !asked {
			// Shutting down: a short backoff of our own. A wait the
			// remote end asked for (Retry-After, a rate limit's reset)
			// is kept, as before Close: retrying sooner only earns
			// another refusal.
			delay = min(delay, maxDrainDelay)
		}
		ev := w.log.Debug()
		if w.failures == 1 || w.failures%warnEvery == 0 {
			ev = w.log.Warn().Int("consecutive_failures", w.failures)
		}
		ev.Str("run_id", it.run).Int("attempt", it.attempts).Dur("retry_in", delay.Round(time.Millisecond)).Err(err).Msg("write failed, will retry")
		w.observe(Event{Sink: w.name, RunID: it.run, Outcome: OutcomeRetrying, Attempt: it.attempts, Err: err, Delay: delay})
		w.settle(it, true, last)
		return delay, false
	}
	return 0, false
}

func (w *worker) setLastErr(err error) {
	w.mu.Lock()
	w.lastErr = err
	w.mu.Unlock()
}

// reports is "1 report" or "N reports".
func reports(n int) string {
	if n == 1 {
		return "1 report"
	}
	return fmt.Sprintf("%d reports", n)
}

// attempt reloads the deferred items' reports (withdrawn: Reload had
// none) and writes the reports: one Write, or one WriteBatch for them all
// when the sink is a BatchWriter. Keep is asked right before.
func (w *worker) attempt(its []*item) []result {
	out := make([]result, len(its))
	var rs []split.Report
	var at []int
	for i, it := range its {
		if !it.held {
			r, ok, err := w.reload(it.run)
			if err != nil {
				out[i].err = err
				continue
			}
			if !ok {
				out[i].withdrawn = true
				continue
			}
			it.r, it.loaded = r, true
			w.observe(Event{Sink: w.name, RunID: it.run, Outcome: OutcomeRequeued, Attempt: it.attempts})
			w.mu.Lock()
			w.reloaded++
			n := 0
			if w.deferred == 0 {
				n, w.reloaded = w.reloaded, 0
			}
			w.mu.Unlock()
			if n > 0 {
				w.log.Info().Int("reloaded", n).Msg("sink caught up: every deferred report was reloaded")
			}
		}
		rs = append(rs, it.r)
		at = append(at, i)
	}
	if len(rs) == 0 {
		return out
	}
	if bw, ok := w.sink.(BatchWriter); ok {
		written, err := w.writeBatch(bw, rs)
		for k, i := range at {
			switch {
			case err != nil:
				out[i].err = err
			case !written[k]:
				out[i].withdrawn = true
			}
		}
		return out
	}
	for k, i := range at {
		if keep := w.f.cfg.Keep; keep != nil && !keep(rs[k]) {
			out[i].withdrawn = true
			continue
		}
		out[i].err = w.write(rs[k])
	}
	return out
}

// writeBatch is write for a BatchWriter: one attempt for the batch.
func (w *worker) writeBatch(bw BatchWriter, rs []split.Report) (written []bool, err error) {
	ctx, cancel := context.WithTimeout(w.f.actx, w.f.cfg.AttemptTimeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			err = Permanent(fmt.Errorf("sink %s panicked: %v", w.name, p))
		}
	}()
	written, err = bw.WriteBatch(ctx, rs, w.f.cfg.Keep)
	if err == nil && len(written) != len(rs) {
		err = Permanent(fmt.Errorf("sink %s: WriteBatch answered for %d of %d reports", w.name, len(written), len(rs)))
	}
	return written, err
}

// reload calls Reload once, bounded like a write; a panic fails the report
// permanently.
func (w *worker) reload(run string) (r split.Report, ok bool, err error) {
	ctx, cancel := context.WithTimeout(w.f.actx, w.f.cfg.AttemptTimeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			err = Permanent(fmt.Errorf("sink %s: reload of run %q panicked: %v", w.name, run, p))
		}
	}()
	r, ok, err = w.f.cfg.Reload(ctx, w.name, run)
	if err != nil {
		err = fmt.Errorf("reload deferred report: %w", err)
	}
	return r, ok, err
}

// write makes one attempt, bounded by AttemptTimeout and Close's abort. A
// panicking sink fails the report permanently instead of the process.
func (w *worker) write(r split.Report) (err error) {
	ctx, cancel := context.WithTimeout(w.f.actx, w.f.cfg.AttemptTimeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			err = Permanent(fmt.Errorf("sink %s panicked: %v", w.name, p))
		}
	}()
	return w.sink.Write(ctx, r)
}

// wait sleeps the backoff. Before Close the wait can be cut short by Close
// (so pending reports get a last attempt); while draining only the abort
// ends it early.
func (w *worker) wait(d time.Duration) {
	ctx, cancel := context.WithCancel(w.f.actx)
	defer cancel()
	w.mu.Lock()
	if !w.draining {
		w.sleepCancel = cancel
	}
	w.mu.Unlock()
	_ = w.f.set.Sleep(ctx, d)
	w.mu.Lock()
	w.sleepCancel = nil
	w.mu.Unlock()
}
