package natstest

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// batchCleanup bounds the wait for goroutines an embedded server leaves
// behind after it shut down: an atomic batch whose first message the
// stream took after it stopped (still queued when the test closed its
// connection and shut the server down) gets a store of its own that only
// its batch timer removes, 10 s later (nats-server's default batch
// timeout), with the store's state-flush goroutine and the access-time
// ticker until then.
const batchCleanup = 10*time.Second + 5*time.Second

// serverStores are the goroutines of a file store an embedded server
// left behind when it shut down (see waitNoLeaks).
var serverStores = []goleak.Option{
	goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
	goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"),
}

// VerifyTestMain runs the package's tests and then checks, as
// goleak.VerifyTestMain does, that no goroutine outlives them; but it
// gives the goroutines up to batchCleanup to end first (goleak's own
// retries last well under a second). A goroutine still running after
// that is reported as leaked, as before, unless only a file store the
// server left (serverStores) remains: that is said on stderr. The cleanup funcs run after the
// tests, before the check (what the package's tests share: a binary
// built once).
func VerifyTestMain(m *testing.M, cleanup ...func()) {
	code := m.Run()
	for _, f := range cleanup {
		f()
	}
	if code == 0 {
		if err := waitNoLeaks(batchCleanup); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: Errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// waitNoLeaks polls goleak.Find until it finds nothing or d has passed,
// and says on stderr when the goroutines took more than a second to end.
func waitNoLeaks(d time.Duration) error {
	start := time.Now()
	for {
		err := goleak.Find()
		if err == nil {
			if waited := time.Since(start); waited > time.Second {
				fmt.Fprintf(os.Stderr, "natstest: goroutines left by the tests ended %.1f s after them\n", waited.Seconds())
			}
			return nil
		}
		if time.Since(start) > d {
			// A file store the embedded server never stops (an atomic
			// batch's, or one opened to restore a partial batch at a
			// restart and left when its last message could not be read):
			// its state-flush loop and the access-time ticker it keeps
			// registered, and nothing else of the server. Said, not
			// failed: a server left running leaves many more.
			if goleak.Find(serverStores...) == nil {
				fmt.Fprintf(os.Stderr, "natstest: an embedded server's file store outlived its server (%.1f s after the tests): %v\n", time.Since(start).Seconds(), err)
				return nil
			}
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
