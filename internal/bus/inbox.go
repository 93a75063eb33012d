package bus

import "github.com/gttsplit/gttsplit/pkg/events"

// InboxPrefix is the prefix of a collector's reply subjects (its
// acknowledgements), nats.go's CustomInboxPrefix: _INBOX_<host token>. A
// collector's credential may subscribe to its own host's prefix only, so
// no host reads another's replies; the aggregator keeps nats.go's
// default, _INBOX, which no host's prefix falls under (its first token
// differs).
func InboxPrefix(host string) string { return "_INBOX_" + events.Token(host) }
