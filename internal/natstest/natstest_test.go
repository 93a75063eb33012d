package natstest_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain checks with goleak that no goroutine outlives the tests; a run
// of TestLeftBehind that TestVerifyTestMainIntegration starts checks with
// natstest.VerifyTestMain, the check under test.
func TestMain(m *testing.M) {
	if os.Getenv(leftEnv) != "" {
		natstest.VerifyTestMain(m)
		return
	}
	goleak.VerifyTestMain(m)
}

// TestRestartKeepsStoreIntegration writes a message, restarts the server on the same
// store and port, and reads the message back.
func TestRestartKeepsStoreIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts nats-server")
	}
	dir := t.TempDir()
	s, err := natstest.NewServer(dir, 0)
	require.NoError(t, err)
	port := natstest.Port(s)
	require.NotZero(t, port)
	require.True(t, s.JetStreamEnabled())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js := natstest.JetStream(t, s.ClientURL())
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage})
	require.NoError(t, err)
	_, err = js.Publish(ctx, "t.1", []byte("kept"))
	require.NoError(t, err)
	js.Conn().Close()
	natstest.Shutdown(s)
	natstest.Shutdown(s) // idempotent

	s2 := natstest.StartAt(t, dir, port)
	require.Equal(t, port, natstest.Port(s2))
	stream, err := natstest.JetStream(t, s2.ClientURL()).Stream(ctx, "T")
	require.NoError(t, err)
	msg, err := stream.GetMsg(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, "kept", string(msg.Data))
}

func TestStartIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts nats-server")
	}
	s := natstest.Start(t)
	info, err := natstest.JetStream(t, s.ClientURL()).AccountInfo(context.Background())
	require.NoError(t, err)
	require.Zero(t, info.Streams)
}
