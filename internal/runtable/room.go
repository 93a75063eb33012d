package runtable

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// How full the JetStream store is. A full events stream refuses new
// events (collectors spool them), a full store refuses every write (the
// state bucket's too): the watch says it before it happens, as a metric
// (gttsplit_store_used_ratio, by store) and once at WARN when a store
// passes nearFull of its limit (again once it fell under roomAgain):
//
//   - stream: the events stream against its max_bytes;
//   - bucket: the state bucket against its max_bytes (the run states stop
//     leaseReserve short of it: store.go);
//   - account: the account's JetStream store against its limit;
//   - server: the embedded server's store against its max_file_store and
//     the room left on its disk (Config.StoreRoom).
//
// It also says once, at the first watch, when the events stream keeps its
// events for ever, or for less long than store.retention keeps a closed
// run (export and replay then miss runs whose state is still kept).

const (
	nearFull  = 0.8
	roomAgain = 0.7
	// accountEvery: the account's info is asked every this many watches.
	accountEvery = 15
)

// StoreRoom is what Config.StoreRoom reports: the bytes a store holds, and
// the most it can hold (its configured limit, or what its disk has room
// for, whichever is less).
type StoreRoom struct {
	Used, Limit uint64
	// What names the limit in the warning ("the embedded server's store
	// /var/lib/...", ...).
	What string
}

// roomWatch is the watch's memory of what it said; only the watch
// goroutine uses it.
type roomWatch struct {
	said      map[string]bool
	watches   int
	ageChecks bool
}

// room sets the store gauges and says a store that nears its limit.
func (t *Table) room(ctx context.Context, info *jetstream.StreamInfo) {
	rw := &t.roomW
	if rw.said == nil {
		rw.said = map[string]bool{}
	}
	// The state bucket's size against its max_bytes: the run states keep
	// off the leases' reserve (store.go).
	t.st.refreshRoom(ctx)
	if mx := t.st.room.max.Load(); mx > 0 {
		t.fill("bucket", uint64(t.st.room.used.Load()), uint64(mx),
			fmt.Sprintf("the state bucket %s's max_bytes: the run states stop %d KiB short of it, kept for the partitions' leases, and wait", Bucket, leaseReserve>>10))
	}
	if info != nil {
		t.m.streamBytes.Set(float64(info.State.Bytes))
		if !rw.ageChecks {
			rw.ageChecks = true
			t.checkMaxAge(info.Config)
		}
		if info.Config.MaxBytes > 0 {
			t.fill("stream", info.State.Bytes, uint64(info.Config.MaxBytes),
				fmt.Sprintf("events stream %s's max_bytes (nats.stream_max_bytes): when full it refuses new events, which wait in the collectors' spools", info.Config.Name))
		}
	}
	if rw.watches%accountEvery == 0 {
		if ai, err := t.js.AccountInfo(ctx); err == nil && ai.Limits.MaxStore > 0 {
			t.fill("account", ai.Store, uint64(ai.Limits.MaxStore),
				"the account's JetStream store limit: when full, no event, state or lease can be written")
		}
	}
	// The embedded server's store is read in process: at every watch.
	if t.cfg.StoreRoom != nil {
		if r := t.cfg.StoreRoom(); r.Limit > 0 {
			t.fill("server", r.Used, r.Limit, r.What+": when full, no event, state or lease can be written")
		}
	}
	rw.watches++
}

// fill sets store's ratio and says, once per episode, that it nears its
// limit.
func (t *Table) fill(store string, used, limit uint64, what string) {
	ratio := float64(used) / float64(limit)
	t.m.storeUsed.WithLabelValues(store).Set(ratio)
	said := t.roomW.said[store]
	switch {
	case ratio >= nearFull && !said:
		t.roomW.said[store] = true
		t.log.Warn().Str("store", store).Uint64("used_bytes", used).Uint64("limit_bytes", limit).
			Str("used", fmt.Sprintf("%.0f %%", 100*ratio)).
			Msg("the JetStream store nears its limit: " + what + "; make room (a shorter nats.stream_max_age, a larger limit or disk)")
	case ratio < roomAgain && said:
		t.roomW.said[store] = false
		t.log.Info().Str("store", store).Str("used", fmt.Sprintf("%.0f %%", 100*ratio)).Msg("the JetStream store has room again")
	}
}

// checkMaxAge says when the events stream keeps its events for ever, or
// for less long than store.retention keeps a closed run.
func (t *Table) checkMaxAge(c jetstream.StreamConfig) {
	keep := t.cfg.Store.Retention
	switch {
	case c.MaxAge == 0 && c.MaxBytes <= 0:
		t.log.Warn().Str("stream", c.Name).Str("setting", "nats.stream_max_age").Dur("store_retention", keep).
			Msg("the events stream keeps every event for ever: it grows until its disk is full; give it a max age (nats stream edit " + c.Name + " --max-age " + durationFlag(keep) + ")")
	case c.MaxAge > 0 && keep > 0 && c.MaxAge < keep:
		t.log.Warn().Str("stream", c.Name).Str("setting", "nats.stream_max_age").Dur("max_age", c.MaxAge).Dur("store_retention", keep).
			Msg("the events stream forgets events before store.retention forgets their closed runs: export and replay miss the older runs the state bucket still holds")
	}
}

// durationFlag writes d as the nats CLI takes it (hours, or days).
func durationFlag(d time.Duration) string {
	if d <= 0 {
		d = 30 * 24 * time.Hour
	}
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return fmt.Sprintf("%dh", (d+time.Hour-1)/time.Hour)
}
