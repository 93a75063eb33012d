// Package natsauth is who may do what on the broker: the NATS permissions
// of gttsplit's two roles, declared once and rendered for both ways a NATS
// account can hold its users.
//
//   - A collector host may publish the events of its own host's runs
//     (gttsplit.run|log|fdinfo.<host>.>) and receive its own replies
//     (_INBOX_<host>.>, bus.InboxPrefix), nothing else: no JetStream API
//     at all, no read of any stream or bucket, no other host's subjects.
//   - The aggregator may administer the project's own streams (the events
//     stream, the state and members buckets), their consumers and keys,
//     publish splits and dead letters, and receive its replies on _INBOX.
//
// AccountsConf renders them as a nats-server accounts file with one user a
// host (config-file users: `aggregator nats-users`); HostTemplate is a
// collector's permissions with the host left as nats-server's {{name()}}
// template, what an account's scoped signing key holds in operator mode
// (one key signs every host's user, named after its host). A test drives a
// real nats-server with each and tries what a role must not do.
package natsauth

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/fleet"
	"github.com/gttsplit/gttsplit/internal/runtable"
	"github.com/gttsplit/gttsplit/pkg/events"
)

// Group is subjects granted together, and why.
type Group struct {
	Why      string
	Subjects []string
}

// Permissions is what a user may publish and subscribe to; anything else
// is refused by the server.
type Permissions struct {
	Publish, Subscribe []Group
}

// Flat returns the subjects of groups, in order.
func Flat(groups []Group) []string {
	var out []string
	for _, g := range groups {
		out = append(out, g.Subjects...)
	}
	return out
}

// NameTemplate is nats-server's template of a user's name in a scoped
// signing key's permissions (operator mode).
const NameTemplate = "{{name()}}"

// Host returns the permissions of a collector host's user. host is the
// host's subject token (events.Token of the collector's host key).
func Host(host string) Permissions {
	return Permissions{
		Publish: []Group{{
			Why: "the events of this host's runs (JetStream publishes, acknowledged on its inbox)",
			Subjects: []string{
				hostSubjects(events.KindRun, host),
				hostSubjects(events.KindLog, host),
				hostSubjects(events.KindFDInfo, host),
			},
		}},
		Subscribe: []Group{{
			Why:      "its own replies only (the collector's nats.go inbox prefix is _INBOX_<host>)",
			Subjects: []string{bus.InboxPrefix(host) + ".>"},
		}},
	}
}

// HostTemplate is Host with the host left to the server: the permissions
// of the scoped signing key that signs every host's user in operator mode,
// where each user is named after its host's subject token.
func HostTemplate() Permissions {
	p := Host("HOST")
	for _, gs := range [][]Group{p.Publish, p.Subscribe} {
		for i := range gs {
			for j, s := range gs[i].Subjects {
				gs[i].Subjects[j] = strings.Replace(s, "HOST", NameTemplate, 1)
			}
		}
	}
	return p
}

func hostSubjects(k events.Kind, host string) string {
	return events.SubjectRoot + "." + string(k) + "." + host + ".>"
}

// Aggregator returns the permissions of the aggregators' user, for the
// events stream named stream (nats.stream).
func Aggregator(stream string) Permissions {
	runs, members := "KV_"+runtable.Bucket, "KV_"+fleet.MembersBucket
	legacy := bus.LegacyStream(stream)
	api := func(op, name string) string { return "$JS.API." + op + "." + name }
	manage := func(names ...string) []string {
		var out []string
		for _, n := range names {
			out = append(out, api("STREAM.INFO", n), api("STREAM.CREATE", n), api("STREAM.UPDATE", n))
		}
		return out
	}
	return Permissions{
		Publish: []Group{
			{Why: "splits and dead letters", Subjects: []string{
				events.SubjectRoot + "." + string(events.KindSplit) + ".>",
				events.SubjectRoot + "." + string(events.KindDLQ) + ".>",
			}},
			{Why: "the account's JetStream limits", Subjects: []string{"$JS.API.INFO"}},
			{Why: "the events stream and the two buckets: read, create, raise to nats.replicas;\nthe events stream partitioned (no delete, no purge)",
				Subjects: manage(stream, runs, members)},
			{Why: "the state bucket's reads", Subjects: []string{
				api("STREAM.MSG.GET", runs), api("DIRECT.GET", runs) + ".>",
			}},
			{Why: "the partitions' consumers (create, info, unpin, pull) and their acks", Subjects: []string{
				api("CONSUMER.*", stream) + ".>", api("CONSUMER.MSG.NEXT", stream) + ".>", "$JS.ACK." + stream + ".>",
			}},
			{Why: "the buckets' keys, their watchers and the open runs a new owner loads", Subjects: []string{
				"$KV." + runtable.Bucket + ".>", "$KV." + fleet.MembersBucket + ".>",
				api("CONSUMER.*", runs) + ".>", api("CONSUMER.MSG.NEXT", runs) + ".>",
				api("CONSUMER.*", members) + ".>",
				"$JS.FC." + runs + ".>", "$JS.FC." + members + ".>",
			}},
			{Why: "only to drain and then delete the partitioned stream of earlier versions\n(docs/operations.md); never to create it", Subjects: []string{
				api("STREAM.INFO", legacy), api("STREAM.DELETE", legacy),
				api("CONSUMER.*", legacy) + ".>", api("CONSUMER.MSG.NEXT", legacy) + ".>", "$JS.ACK." + legacy + ".>",
			}},
		},
		Subscribe: []Group{{Why: "its own replies (nats.go's default inbox)", Subjects: []string{"_INBOX.>"}}},
	}
}

// Reserved user names: a host may not be called so.
const (
	AggregatorUser = "aggregator"
	SysUser        = "sys"
)

// hostRE is what a host of the users file may be: a host name's letters,
// digits, '-', '_' and '.', which its subject token turns into '_'.
var hostRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// User is a host's user of the users file.
type User struct {
	Host        string // as given
	Name        string // the user name: the host's subject token
	PasswordEnv string // the environment variable nats-server reads its password from
}

// Users checks a host list and returns each host's user, in the order
// given: every host a host name (letters, digits, '-', '_', '.'), at most
// events.MaxTokenBytes, none named like the aggregator's or the system
// user, no two sharing a user or a password variable.
func Users(hosts []string) ([]User, error) {
	if len(hosts) == 0 {
		return nil, fmt.Errorf("no host given")
	}
	var out []User
	names, envs := map[string]string{}, map[string]string{}
	for _, h := range hosts {
		if !hostRE.MatchString(h) || len(h) > events.MaxTokenBytes {
			return nil, fmt.Errorf("host %q: a host name is letters, digits, '-', '_' and '.', at most %d bytes, starting with a letter or digit", h, events.MaxTokenBytes)
		}
		u := User{Host: h, Name: events.Token(h), PasswordEnv: PasswordEnv(h)}
		switch strings.ToLower(u.Name) {
		case AggregatorUser, SysUser:
			return nil, fmt.Errorf("host %q: %q is the name of another user of the account", h, u.Name)
		}
		if o, dup := names[u.Name]; dup {
			return nil, fmt.Errorf("hosts %q and %q share the user %q", o, h, u.Name)
		}
		if o, dup := envs[u.PasswordEnv]; dup {
			return nil, fmt.Errorf("hosts %q and %q share the password variable %s", o, h, u.PasswordEnv)
		}
		names[u.Name], envs[u.PasswordEnv] = h, h
		out = append(out, u)
	}
	return out, nil
}

// PasswordEnv is the environment variable holding a host's password in
// the users file: NATS_<HOST>_PASSWORD, the host upper-cased with every
// '.' and '-' as '_' (strix01: NATS_STRIX01_PASSWORD).
func PasswordEnv(host string) string {
	return "NATS_" + strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r == '.' || r == '-':
			return '_'
		}
		return r
	}, host) + "_PASSWORD"
}
