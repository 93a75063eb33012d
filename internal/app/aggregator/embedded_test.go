package aggregator

import (
	"fmt"
	"net"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStartEmbeddedStoreLocked: a second embedded server on a store in use
// fails at once, naming the store and the holder; once the first shut
// down, the store is free again.
func TestStartEmbeddedStoreLocked(t *testing.T) {
	skipShort(t)
	t.Parallel()
	store := filepath.Join(t.TempDir(), "store")
	ns, err := StartEmbedded("127.0.0.1:0", store, testLogger(t))
	require.NoError(t, err)
	_, err = StartEmbedded("127.0.0.1:0", store, testLogger(t))
	require.ErrorIs(t, err, ErrStoreInUse)
	require.ErrorContains(t, err, store)
	require.ErrorContains(t, err, "pid")
	ns.Shutdown()
	ns.WaitForShutdown()
	eventually(t, "the store's lock released", func() bool {
		ns2, err := StartEmbedded("127.0.0.1:0", store, testLogger(t))
		if err != nil {
			return false
		}
		ns2.Shutdown()
		ns2.WaitForShutdown()
		return true
	})
}

// TestStartEmbeddedPortBusy: a taken listen address is reported as such at
// once (not as a server that does not start), and the store is left free.
func TestStartEmbeddedPortBusy(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	store := filepath.Join(t.TempDir(), "store")
	_, err = StartEmbedded(ln.Addr().String(), store, testLogger(t))
	require.ErrorIs(t, err, syscall.EADDRINUSE)
	require.ErrorContains(t, err, ln.Addr().String())
	require.NotErrorIs(t, err, ErrStoreInUse)
	require.ErrorContains(t, err, fmt.Sprintf("%s: bind: address already in use", ln.Addr()))
	if testing.Short() {
		return
	}
	ns, err := StartEmbedded("127.0.0.1:0", store, testLogger(t))
	require.NoError(t, err, "the failed start released the store")
	ns.Shutdown()
	ns.WaitForShutdown()
}
