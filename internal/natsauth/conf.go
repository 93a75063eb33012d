package natsauth

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Account is the name of the account gttsplit's users belong to.
const Account = "GTTSPLIT"

// AccountsConf renders the nats-server accounts file of a fleet: the
// account with JetStream, the aggregator's user, one user a host (each
// with Host's permissions, its password read from PasswordEnv), and the
// system account. The file is what n1.conf, n2.conf and n3.conf of
// deploy/nats include; deploy/nats/accounts.conf is this for strix01 and
// strix02 and the stream GTTSPLIT.
func AccountsConf(hosts []string, stream string) ([]byte, error) {
	users, err := Users(hosts)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w(`# Accounts and users of the gttsplit NATS cluster, included by n1.conf,
# n2.conf and n3.conf (every node must have the same).
#
# Written by `+"`aggregator nats-users`"+` (the hosts as arguments or in a file,
# --hosts-file; the stream of nats.stream): run it again with your hosts
# rather than editing the users by hand.
#
# Every password comes from nats-server's environment (its
# EnvironmentFile, a Kubernetes Secret, compose's environment): one
# NATS_<HOST>_PASSWORD a host, NATS_AGGREGATOR_PASSWORD and
# NATS_SYS_PASSWORD. nats-server refuses to start when one is not set. To
# keep clear text out of the environment, put a bcrypt hash there instead
# (`+"`nats server passwd`"+`).
#
# A host's user is named after the host (the collector's host key, '.' as
# '_'): it may publish only its own host's events and receive only its
# own replies, and has no JetStream API at all. The aggregator's user
# administers the events stream %s and the buckets GTTSPLIT_RUNS and
# GTTSPLIT_MEMBERS, their consumers and keys, and nothing else
# (docs/security.md). A subject missing here shows as "Permissions
# Violation" in the server's log.

`, stream)
	w("AGGREGATOR_PERMISSIONS: {\n")
	block(&b, "  ", Aggregator(stream))
	w("}\n\naccounts {\n  %s {\n    jetstream: enabled\n    users: [\n", Account)
	w("      { user: %s, password: $NATS_AGGREGATOR_PASSWORD, permissions: $AGGREGATOR_PERMISSIONS }\n", AggregatorUser)
	for _, u := range users {
		p := Host(u.Name)
		w("      { user: %s, password: $%s, permissions: {\n", strconv.Quote(u.Name), u.PasswordEnv)
		w("          publish: { allow: [%s] }\n", quoted(Flat(p.Publish)))
		w("          subscribe: { allow: [%s] } } }\n", quoted(Flat(p.Subscribe)))
	}
	w("    ]\n  }\n")
	w("  # The system account: the cluster's own traffic and `nats server` tools.\n")
	w("  SYS {\n    users: [ { user: %s, password: $NATS_SYS_PASSWORD } ]\n  }\n}\nsystem_account: SYS\n", SysUser)
	return b.Bytes(), nil
}

// block writes a permissions map's body, each group with its reason.
func block(b *bytes.Buffer, indent string, p Permissions) {
	for _, dir := range []struct {
		name   string
		groups []Group
	}{{"publish", p.Publish}, {"subscribe", p.Subscribe}} {
		fmt.Fprintf(b, "%s%s: {\n%s  allow: [\n", indent, dir.name, indent)
		for _, g := range dir.groups {
			for _, line := range strings.Split(g.Why, "\n") {
				fmt.Fprintf(b, "%s    # %s\n", indent, line)
			}
			for _, s := range g.Subjects {
				fmt.Fprintf(b, "%s    %s\n", indent, strconv.Quote(s))
			}
		}
		fmt.Fprintf(b, "%s  ]\n%s}\n", indent, indent)
	}
}

func quoted(subjects []string) string {
	q := make([]string, len(subjects))
	for i, s := range subjects {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

// ReadHosts reads a host list: one host a line; blank lines and what
// follows '#' are ignored.
func ReadHosts(r io.Reader) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	return out, sc.Err()
}
