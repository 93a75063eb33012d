package fleet

import (
	"strings"
	"time"
)

// A member's key: what it says (when it was written and how often its
// member renews it), how long the others take the member for live after
// it, and the warning of a member whose leases live another time.

// seenMember is when a member's key or one of its leases was last
// renewed: when its renewal came back (mono()) and when the server stored
// it (the bucket's clock); and how long it is taken for live after that.
type seenMember struct {
	at, ttl time.Duration
	stored  time.Time
}

// live says whether the member is live at now.
func (s seenMember) live(now time.Duration) bool { return now-s.at <= s.ttl }

// outlivedBy says whether a renewal stored at stored (this member's own,
// come back) shows the member dead: stored more than its time to live
// after its last renewal. Renewals come back in the order the server
// stored them, so a member renewing in time had one come back before it.
func (s seenMember) outlivedBy(stored time.Time) bool { return stored.Sub(s.stored) > s.ttl }

// memberValue is what a member writes under its key: the time, and how
// often it renews the key, from which the others know how long to take it
// for live (its lease_ttl may differ from theirs).
func memberValue(every time.Duration) string {
	return time.Now().UTC().Format(time.RFC3339Nano) + " " + every.String()
}

// memberTTLOf is how long the member whose key holds value is taken for
// live after a renewal: memberTTL of the renewals it announces (an earlier
// version's key, the time alone, was renewed every heartbeat and lived
// five of them).
func memberTTLOf(value []byte, heartbeat time.Duration) time.Duration {
	if d, ok := renewsEvery(value); ok {
		return Config{LeaseTTL: d * renewals}.memberTTL()
	}
	return 5 * heartbeat
}

// renewsEvery is how often the member whose key holds value says it
// renews it (false for an earlier version's key, the time alone).
func renewsEvery(value []byte) (time.Duration, bool) {
	_, every, ok := strings.Cut(string(value), " ")
	d, err := time.ParseDuration(every)
	return d, ok && err == nil && d > 0
}

// warnOtherTTL warns, once a member, when the member under key renews
// its key at another pace than this one: its consumer.lease_ttl differs.
// A lease taken again after its previous revision's expiry removed its
// renewal (Lease.retake) is safe only while every member's leases live
// as long. m.mu is held.
func (m *Member) warnOtherTTL(key string, value []byte) {
	every, ok := renewsEvery(value)
	if !ok || every == m.cfg.renewEvery() || m.ttlWarned[key] {
		return
	}
	if m.ttlWarned == nil {
		m.ttlWarned = map[string]bool{}
	}
	m.ttlWarned[key] = true
	m.log.Warn().Str("other", key).Dur("other_lease_ttl", every*renewals).Dur("lease_ttl", m.cfg.LeaseTTL).
		Msg("another aggregator of the group has another consumer.lease_ttl: give every aggregator of a group the same value")
}
