package runtable

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gttsplit/gttsplit/internal/fleet"
	"github.com/gttsplit/gttsplit/internal/regress"
	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/sinks/commentsink"
)

// Lane changes on the tracker: each host, lane and model file keeps one
// sticky "lane changes" comment on the issue its runs name, rewritten
// (edited in place) whenever its changes between builds change
// (regress.NewChanges over its closed runs in the run index).
//
// Once across a fleet: every aggregator watches the run index, but a
// lane's comment is written only by the owner of the lane's partition
// (bus.PartitionOf of "HOST/LANE/MODEL", among the runs' partitions),
// which holds that partition's lease. What it posted is recorded under
// the lane's key in the state bucket (lanechg.<hash>: per issue the
// comment's id, the digest of its body and its changes), written fenced by
// the same lease, so only the partition's owner writes it, and a
// partition's next owner (a take-over, a restart) reads what was posted
// and posts only what differs. The record also keeps the changes whose
// runs left the store (store.retention): the comment keeps them.
//
// Once across restarts: a lane is looked at again when its partition is
// acquired and whenever one of its runs closes; its comment is posted
// when the body differs from the record's. A post that fails is retried
// with the sinks' backoff (sinks.retry.*; a rate limit's delay honoured);
// a lane whose post never went through is posted at the next start,
// since its record still differs.

// LaneChanges is what a Table needs to keep each lane's changes comment
// (Config.LaneChanges; nil: none).
type LaneChanges struct {
	Thresholds regress.Thresholds
	// PageURL is the live page's address for the comment's links ("":
	// none).
	PageURL string
	// DefaultIssue receives the changes of lanes whose runs name no issue
	// ("": not posted).
	DefaultIssue string
	// Retry is the backoff between attempts of one lane's post.
	Retry sinks.RetryPolicy
	// Post keeps a lane's comment on an issue: commentsink.Sink.Sticky.
	Post func(ctx context.Context, issue, key, body string, known int64, keep func() bool) (int64, error)
}

// Tuning of the lane changes' poster.
const (
	// laneSettle is how long the poster waits after a run closed for
	// others to close, so that a burst of runs is one edit.
	laneSettle = 500 * time.Millisecond
	// laneIdle is the longest the poster sleeps without being woken (a
	// partition acquired, a retry due).
	laneIdle = 5 * time.Second
)

// laneChangesPrefix starts the lanes' records in the state bucket.
const laneChangesPrefix = "lanechg."

// laneChangesKey is the key of lane k's record.
func laneChangesKey(k LaneKey) string {
	h := sha256.Sum256([]byte(k.String()))
	return laneChangesPrefix + hex.EncodeToString(h[:16])
}

// String is "HOST/LANE/MODEL": the comment's key and what the lane's
// partition is of.
func (k LaneKey) String() string { return k.Host + "/" + k.Lane + "/" + k.Model }

// laneRecord is what a lane's comments are on the tracker, per issue.
type laneRecord struct {
	Host   string                `json:"host"`
	Lane   string                `json:"lane"`
	Model  string                `json:"model"`
	Issues map[string]*laneIssue `json:"issues"`
}

// laneIssue is a lane's comment on one issue: its id, the digest of the
// body posted, and the changes it shows.
type laneIssue struct {
	Comment  int64                `json:"comment_id"`
	Sum      string               `json:"sum"`
	Changes  []regress.LaneChange `json:"changes"`
	Controls []regress.LaneChange `json:"controls,omitempty"`
}

// laneMembers files every closed run with figures under its lane (host,
// lane and model file, its controls too), for the lane changes. Index.mu
// guards it; hook, when set, is told every lane whose runs changed (under
// Index.mu: it must not block nor take the index's lock).
type laneMembers struct {
	byLane  map[LaneKey]map[string]struct{}
	runLane map[string]LaneKey
	hook    atomic.Pointer[func(LaneKey)]
}

func newLaneMembers() laneMembers {
	return laneMembers{byLane: map[LaneKey]map[string]struct{}{}, runLane: map[string]LaneKey{}}
}

// refile files run id under the lane of s (nil: deleted). Index.mu is
// held.
func (lm *laneMembers) refile(id string, s *RunSummary) {
	var k LaneKey
	in := s != nil && s.State == "closed" && s.Split != nil
	if in {
		k = LaneKey{s.Host, s.Lane, s.Split.Model}
	}
	was, had := lm.runLane[id]
	if had && (!in || was != k) {
		delete(lm.runLane, id)
		if rs := lm.byLane[was]; rs != nil {
			delete(rs, id)
			if len(rs) == 0 {
				delete(lm.byLane, was)
			}
		}
		lm.tell(was)
	}
	if !in {
		return
	}
	rs := lm.byLane[k]
	if rs == nil {
		rs = map[string]struct{}{}
		lm.byLane[k] = rs
	}
	rs[id] = struct{}{}
	lm.runLane[id] = k
	lm.tell(k)
}

func (lm *laneMembers) tell(k LaneKey) {
	if f := lm.hook.Load(); f != nil {
		(*f)(k)
	}
}

// unfile takes run id out of its lane without telling the hook (its
// summary was evicted: the lane's runs did not change). Index.mu is held.
func (lm *laneMembers) unfile(id string) {
	was, had := lm.runLane[id]
	if !had {
		return
	}
	delete(lm.runLane, id)
	if rs := lm.byLane[was]; rs != nil {
		delete(rs, id)
		if len(rs) == 0 {
			delete(lm.byLane, was)
		}
	}
}

// laneKeys returns the lanes with closed runs (held or evicted).
func (ix *Index) laneKeys() []LaneKey {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := make([]LaneKey, 0, len(ix.members.byLane))
	for k := range ix.members.byLane {
		out = append(out, k)
	}
	for k, g := range ix.groupIDs {
		if _, ok := ix.members.byLane[k]; !ok && len(ix.groups[g].evicted) > 0 {
			out = append(out, k)
		}
	}
	return out
}

// lanePoster keeps the lanes' comments of the partitions this table owns.
type lanePoster struct {
	t   *Table
	cfg LaneChanges

	// mu guards dirty, retry and busy; it is taken after Index.mu (the
	// index's hook) and nothing is taken while it is held.
	mu    sync.Mutex
	dirty map[LaneKey]struct{}
	retry map[LaneKey]laneRetry
	busy  map[int]int // posts in flight by partition
	wake  chan struct{}

	// checks counts the lanes looked at by outcome.
	checks *prometheus.CounterVec
}

// laneRetry is a lane whose post failed: when it is tried again.
type laneRetry struct {
	failures int
	at       time.Time
}

func newLanePoster(t *Table, cfg LaneChanges) *lanePoster {
	lp := &lanePoster{t: t, cfg: cfg, dirty: map[LaneKey]struct{}{}, retry: map[LaneKey]laneRetry{}, busy: map[int]int{},
		wake: make(chan struct{}, 1)}
	lp.checks = t.m.laneChecks
	hook := lp.mark
	t.index.members.hook.Store(&hook)
	return lp
}

// mark has lane k looked at again.
func (lp *lanePoster) mark(k LaneKey) {
	lp.mu.Lock()
	lp.dirty[k] = struct{}{}
	lp.mu.Unlock()
	select {
	case lp.wake <- struct{}{}:
	default:
	}
}

// acquired has the lanes of partition p looked at (their comments are
// this table's to keep now).
func (lp *lanePoster) acquired(p int) {
	for _, k := range lp.t.index.laneKeys() {
		if lp.partition(k) == p {
			lp.mark(k)
		}
	}
}

// partition is the partition whose owner keeps lane k's comment.
func (lp *lanePoster) partition(k LaneKey) int { return partitionOf(k.String(), lp.t.cfg.Partitions) }

// folds says this group folds lane's runs (consumer.lanes; empty: every
// lane): another group's lanes are its own to post.
func (lp *lanePoster) folds(lane string) bool {
	lanes := lp.t.cfg.Consumer.LaneList()
	return len(lanes) == 0 || slices.Contains(lanes, lane)
}

// run keeps the comments until ctx ends: once the index was read, every
// lane is looked at, then each lane whose runs changed, whose partition
// was acquired, or whose retry is due.
func (lp *lanePoster) run(ctx context.Context) {
	select {
	case <-lp.t.index.ready:
	case <-ctx.Done():
		return
	}
	for _, k := range lp.t.index.laneKeys() {
		lp.mark(k)
	}
	for {
		wait := lp.pass(ctx)
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-lp.wake:
			timer.Stop()
			select {
			case <-ctx.Done():
				return
			case <-time.After(laneSettle):
			}
		case <-timer.C:
		}
	}
}

// pass looks at the lanes that are due and returns how long until the
// next retry is (at most laneIdle).
func (lp *lanePoster) pass(ctx context.Context) time.Duration {
	now := time.Now()
	next := now.Add(laneIdle)
	lp.mu.Lock()
	var due []LaneKey
	for k := range lp.dirty {
		if r, ok := lp.retry[k]; ok && now.Before(r.at) {
			if r.at.Before(next) {
				next = r.at
			}
			continue
		}
		due = append(due, k)
		delete(lp.dirty, k)
	}
	lp.mu.Unlock()
	slices.SortFunc(due, func(a, b LaneKey) int {
		return cmp.Or(cmp.Compare(a.Host, b.Host), cmp.Compare(a.Lane, b.Lane), cmp.Compare(a.Model, b.Model))
	})
	for i, k := range due {
		if ctx.Err() != nil {
			for _, rest := range due[i:] {
				lp.mark(rest)
			}
			break
		}
		lp.look(ctx, k)
	}
	lp.mu.Lock()
	for k := range lp.dirty {
		if r, ok := lp.retry[k]; ok && r.at.Before(next) {
			next = r.at
		}
	}
	lp.mu.Unlock()
	return max(time.Until(next), 10*time.Millisecond)
}

// look keeps lane k's comments if its partition is this table's.
func (lp *lanePoster) look(ctx context.Context, k LaneKey) {
	p := lp.partition(k)
	pt := lp.t.part(p)
	if pt == nil || !lp.folds(k.Lane) {
		lp.mu.Lock()
		delete(lp.retry, k) // its owner's now: looked at again if this table acquires it
		lp.mu.Unlock()
		return
	}
	lp.mu.Lock()
	lp.busy[p]++
	lp.mu.Unlock()
	outcome, err := lp.post(ctx, pt, k)
	lp.mu.Lock()
	lp.busy[p]--
	r := lp.retry[k]
	delete(lp.retry, k)
	lp.mu.Unlock()
	log := lp.t.log.With().Str("lane", k.String()).Logger()
	switch {
	case err == nil:
		lp.checks.WithLabelValues(outcome).Inc()
	case errors.Is(err, fleet.ErrLost) || errors.Is(err, commentsink.ErrNotKept) || ctx.Err() != nil:
		// The partition moved (its next owner keeps the comment), or
		// the table stops (the next start does).
	case sinks.IsPermanent(err):
		lp.checks.WithLabelValues("failed").Inc()
		log.Error().Err(err).Msg("lane changes comment not posted (not retried until the lane changes again)")
	default:
		lp.checks.WithLabelValues("failed").Inc()
		r.failures++
		d := lp.cfg.Retry.Delay(err, r.failures, rand.Float64())
		r.at = time.Now().Add(d)
		lp.mu.Lock()
		lp.retry[k] = r
		lp.dirty[k] = struct{}{}
		lp.mu.Unlock()
		log.Warn().Err(err).Int("failures", r.failures).Dur("retry_in", d.Round(time.Second)).Msg("lane changes comment not posted; retrying")
	}
}

// post keeps lane k's comment on each issue its changes name, writing
// the lane's record after each comment posted. Its outcome is posted (a
// comment created or edited), unchanged (every comment's body as posted
// before) or nothing (no change to post, no comment).
func (lp *lanePoster) post(ctx context.Context, pt *part, k LaneKey) (string, error) {
	key := laneChangesKey(k)
	rec := laneRecord{Host: k.Host, Lane: k.Lane, Model: k.Model, Issues: map[string]*laneIssue{}}
	b, err := lp.t.st.get(ctx, key)
	switch {
	case errors.Is(err, errNotFound):
	case err != nil:
		return "", err
	default:
		if err := json.Unmarshal(b, &rec); err != nil {
			lp.t.log.Warn().Err(err).Str("lane", k.String()).Msg("lane changes record unreadable: written again")
		}
		if rec.Issues == nil {
			rec.Issues = map[string]*laneIssue{}
		}
	}
	comments := lp.comments(lp.t.laneRuns(ctx, k), k, rec)
	issues := make([]string, 0, len(comments))
	for iss := range comments {
		issues = append(issues, iss)
	}
	slices.Sort(issues)
	keep := func() bool { return lp.t.part(pt.p) == pt && held(ctx, pt.lease) }
	outcome := "nothing"
	if len(issues) > 0 {
		outcome = "unchanged"
	}
	for _, iss := range issues {
		lc := comments[iss]
		body := lc.Markdown(lp.cfg.Thresholds, lp.cfg.PageURL)
		sum := sha256.Sum256([]byte(body))
		sumHex := hex.EncodeToString(sum[:])
		old := rec.Issues[iss]
		if old != nil && old.Sum == sumHex {
			continue
		}
		var known int64
		if old != nil {
			known = old.Comment
		}
		id, err := lp.cfg.Post(ctx, iss, k.String(), body, known, keep)
		if err != nil {
			return "", err
		}
		outcome = "posted"
		rec.Issues[iss] = &laneIssue{Comment: id, Sum: sumHex, Changes: lc.Changes, Controls: lc.Controls}
		rb, err := json.Marshal(rec)
		if err != nil {
			return "", sinks.Permanent(err)
		}
		if err := lp.t.st.put(ctx, pt.lease, key, rb); err != nil {
			return "", fmt.Errorf("lane changes record: %w", err)
		}
		lp.t.log.Info().Str("lane", k.String()).Str("issue", iss).Int("changes", len(lc.Changes)+len(lc.Controls)).Msg("lane changes comment posted")
	}
	return outcome, nil
}

// comments are what lane k's comment on each issue is to show: the
// changes of its runs (and its controls'), with those its record keeps of
// runs that left the store, each on the issue its later run names (else
// the default issue); an issue the record has a comment on keeps it,
// even when no change is left for it.
func (lp *lanePoster) comments(runs []regress.Run, k LaneKey, rec laneRecord) map[string]*regress.LaneComment {
	var lane, ctl regress.Lane
	for _, l := range regress.NewChanges(runs, regress.Filter{}, lp.cfg.Thresholds).Lanes {
		if l.Control {
			ctl = l
		} else {
			lane = l
		}
	}
	var old, oldCtl []regress.LaneChange
	for _, ri := range rec.Issues {
		old = append(old, ri.Changes...)
		oldCtl = append(oldCtl, ri.Controls...)
	}
	out := map[string]*regress.LaneComment{}
	of := func(iss string) *regress.LaneComment {
		lc := out[iss]
		if lc == nil {
			lc = &regress.LaneComment{Host: k.Host, Lane: k.Lane, Model: k.Model}
			out[iss] = lc
		}
		return lc
	}
	for _, ch := range regress.Carry(old, lane) {
		if iss := cmp.Or(ch.Issue, lp.cfg.DefaultIssue); iss != "" {
			of(iss).Changes = append(of(iss).Changes, ch)
		}
	}
	for _, ch := range regress.Carry(oldCtl, ctl) {
		if iss := cmp.Or(ch.Issue, lp.cfg.DefaultIssue); iss != "" {
			of(iss).Controls = append(of(iss).Controls, ch)
		}
	}
	for iss := range rec.Issues {
		of(iss)
	}
	return out
}

// settle waits, at most until deadline, for the posts in flight of
// partition p to end (Release).
func (lp *lanePoster) settle(p int, deadline time.Time) {
	for time.Now().Before(deadline) {
		lp.mu.Lock()
		n := lp.busy[p]
		lp.mu.Unlock()
		if n == 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
