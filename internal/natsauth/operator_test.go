package natsauth_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/app/collector"
	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/natsauth"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
)

// operatorFleet is what an operator mints for decentralized auth: the
// operator, the system account, the GTTSPLIT account with JetStream and
// two scoped signing keys, one a role: "host", whose permissions are
// natsauth.HostTemplate (the host is the user's name), and "aggregator",
// whose permissions are natsauth.Aggregator. A user signed by a scoped key
// carries no permissions of its own: the key's apply.
type operatorFleet struct {
	dir                   string
	operator, acc, sys    nkeys.KeyPair
	hostKey, aggregateKey nkeys.KeyPair
	conf                  string // the server's configuration
}

func mint(t *testing.T, dir string) *operatorFleet {
	t.Helper()
	f := &operatorFleet{dir: dir}
	var err error
	f.operator, err = nkeys.CreateOperator()
	require.NoError(t, err)
	f.acc, err = nkeys.CreateAccount()
	require.NoError(t, err)
	f.sys, err = nkeys.CreateAccount()
	require.NoError(t, err)
	f.hostKey, err = nkeys.CreateAccount()
	require.NoError(t, err)
	f.aggregateKey, err = nkeys.CreateAccount()
	require.NoError(t, err)
	pub := func(kp nkeys.KeyPair) string {
		p, err := kp.PublicKey()
		require.NoError(t, err)
		return p
	}

	oc := jwt.NewOperatorClaims(pub(f.operator))
	oc.Name = "gttsplit"
	oc.SystemAccount = pub(f.sys)
	opJWT, err := oc.Encode(f.operator)
	require.NoError(t, err)

	sc := jwt.NewAccountClaims(pub(f.sys))
	sc.Name = "SYS"
	sysJWT, err := sc.Encode(f.operator)
	require.NoError(t, err)

	ac := jwt.NewAccountClaims(pub(f.acc))
	ac.Name = natsauth.Account
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	for role, p := range map[string]natsauth.Permissions{"host": natsauth.HostTemplate(), "aggregator": natsauth.Aggregator(bus.DefaultStream)} {
		key := f.hostKey
		if role == "aggregator" {
			key = f.aggregateKey
		}
		scope := jwt.NewUserScope()
		scope.Key, scope.Role = pub(key), role
		scope.Template.Pub.Allow.Add(natsauth.Flat(p.Publish)...)
		scope.Template.Sub.Allow.Add(natsauth.Flat(p.Subscribe)...)
		ac.SigningKeys.AddScopedSigner(scope)
	}
	accJWT, err := ac.Encode(f.operator)
	require.NoError(t, err)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "operator.jwt"), []byte(opJWT), 0o644))
	f.conf = fmt.Sprintf(`listen: 127.0.0.1:-1
jetstream { store_dir: %q }
operator: %q
system_account: %s
resolver: MEMORY
resolver_preload: {
  %s: %s
  %s: %s
}
`, filepath.Join(dir, "store"), filepath.Join(dir, "operator.jwt"), pub(f.sys), pub(f.acc), accJWT, pub(f.sys), sysJWT)
	return f
}

// creds writes the credentials file of user, signed by the role's scoped
// key (with perms, a user JWT that claims permissions of its own), and
// returns its path.
func (f *operatorFleet) creds(t *testing.T, user string, perms *jwt.Permissions) string {
	t.Helper()
	ukp, err := nkeys.CreateUser()
	require.NoError(t, err)
	upub, err := ukp.PublicKey()
	require.NoError(t, err)
	apub, err := f.acc.PublicKey()
	require.NoError(t, err)
	uc := jwt.NewUserClaims(upub)
	uc.Name, uc.IssuerAccount = user, apub
	// A scoped user has neither permissions nor limits of its own (as
	// `nsc add user -K ROLE` writes it).
	uc.UserPermissionLimits = jwt.UserPermissionLimits{}
	if perms != nil {
		uc.Permissions = *perms
	}
	signer := f.hostKey
	if user == natsauth.AggregatorUser {
		signer = f.aggregateKey
	}
	ujwt, err := uc.Encode(signer)
	require.NoError(t, err)
	seed, err := ukp.Seed()
	require.NoError(t, err)
	b, err := jwt.FormatUserConfig(ujwt, seed)
	require.NoError(t, err)
	path := filepath.Join(f.dir, user+".creds")
	if perms != nil {
		path = filepath.Join(f.dir, user+"-widened.creds")
	}
	require.NoError(t, os.WriteFile(path, b, 0o600))
	return path
}

// TestOperatorModeIntegration runs the permissions in operator mode (an
// account with a scoped signing key a role, the host's key templated on
// the user's name) on a real nats-server, and tries every attack as in
// config mode; a host's user JWT that claims wider permissions is
// refused; and `collector replay --host strix01` with strix01's
// credentials file delivers strix01's run.
func TestOperatorModeIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	dir := t.TempDir()
	f := mint(t, dir)
	url := startConf(t, dir, f.conf)
	exercise(t, url, func(t *testing.T, user string) nats.Option {
		return nats.UserCredentials(f.creds(t, user, nil))
	})

	// strix01's own JWT, signed by the host key, claiming to publish
	// anything: the server refuses the connection.
	wide := &jwt.Permissions{Pub: jwt.Permission{Allow: jwt.StringList{">"}}}
	_, err := nats.Connect(url, nats.UserCredentials(f.creds(t, "strix01", wide)))
	require.Error(t, err, "a scoped user with permissions of its own")

	// The collector itself, with strix01's credentials file.
	cfg := config.DefaultCollector()
	cfg.Host, cfg.Lane = "strix01", "gpu0"
	cfg.NATS.URL, cfg.NATS.CredsFile = url, f.creds(t, "strix01", nil)
	cfg.Spool.Dir = filepath.Join(dir, "spool")
	cfg.ShutdownTimeout = rt.WaitFor
	cio := collector.IO{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard}
	st, err := collector.Replay(ctx(t), cfg, []string{rt.Runs("4b")}, cio, zerolog.Nop())
	require.NoError(t, err)
	require.Positive(t, st.Delivered)
	require.Equal(t, collector.ReplayStats{Sent: st.Sent, Delivered: st.Sent}, st)
}
