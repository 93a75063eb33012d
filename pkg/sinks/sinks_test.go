package sinks_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/sinks/sinktest"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPermanent(t *testing.T) {
	t.Parallel()
	base := errors.New("boom")
	require.NoError(t, sinks.Permanent(nil))
	require.False(t, sinks.IsPermanent(nil))
	require.False(t, sinks.IsPermanent(base))

	p := sinks.Permanent(base)
	require.True(t, sinks.IsPermanent(p))
	require.ErrorIs(t, p, base, "Unwrap")
	require.Equal(t, "boom", p.Error())
	wrapped := fmt.Errorf("write run %q: %w", "r", p)
	require.True(t, sinks.IsPermanent(wrapped), "found through wrapping")
	require.True(t, sinks.IsPermanent(errors.Join(base, p)))
	require.True(t, sinks.IsPermanent(fmt.Errorf("x: %w", sinks.ErrClosed)), "ErrClosed is permanent")
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	base := errors.New("429")
	require.NoError(t, sinks.RetryAfter(nil, time.Second))
	e := fmt.Errorf("post: %w", sinks.RetryAfter(base, 30*time.Second))
	d, ok := sinks.RetryAfterDelay(e)
	require.True(t, ok)
	require.Equal(t, 30*time.Second, d)
	require.ErrorIs(t, e, base)
	require.False(t, sinks.IsPermanent(e))
	_, ok = sinks.RetryAfterDelay(base)
	require.False(t, ok)
	d, _ = sinks.RetryAfterDelay(sinks.RetryAfter(base, -time.Second))
	require.Zero(t, d)
}

func TestRetryPolicy(t *testing.T) {
	t.Parallel()
	p := sinks.DefaultRetryPolicy()
	var got []time.Duration
	for n := 1; n <= 12; n++ {
		got = append(got, p.Backoff(n, 0.5))
	}
	require.Equal(t, []time.Duration{
		time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second,
		64 * time.Second, 128 * time.Second, 256 * time.Second, 5 * time.Minute, 5 * time.Minute, 5 * time.Minute,
	}, got, "doubling, capped at 5m")
	require.Equal(t, 800*time.Millisecond, p.Backoff(1, 0), "-20% jitter")
	require.Equal(t, 1200*time.Millisecond, p.Backoff(1, 1), "+20% jitter")
	require.Equal(t, 5*time.Minute, p.Backoff(40, 1), "jitter never exceeds the cap")
	require.Equal(t, 5*time.Minute, p.Backoff(1000, 0.999), "no overflow")

	hint := sinks.RetryAfter(errors.New("x"), 42*time.Second)
	require.Equal(t, 42*time.Second, p.Delay(hint, 7, 0.9), "a remote hint wins over backoff")
	require.Equal(t, time.Hour, p.Delay(sinks.RetryAfter(errors.New("x"), 48*time.Hour), 1, 0.5), "hints capped")
	require.Equal(t, 4*time.Second, p.Delay(errors.New("x"), 3, 0.5))

	var zero sinks.RetryPolicy
	require.Equal(t, time.Second, zero.Backoff(1, 0.5), "zero policy takes the defaults")
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	mk := func(typ string) sinks.Factory {
		return sinks.Factory{
			Type:          typ,
			DefaultConfig: func() any { return &struct{}{} },
			New: func(cfg any, set sinks.Settings) (sinks.Sink, error) {
				return &sinktest.Memory{}, nil
			},
		}
	}
	r, err := sinks.NewRegistry(mk("file"), mk("json"))
	require.NoError(t, err)
	require.Len(t, r, 2)
	s, err := r.New("json", nil, sinks.Settings{})
	require.NoError(t, err)
	require.NoError(t, s.Close(context.Background()))
	_, err = r.New("nope", nil, sinks.Settings{})
	require.ErrorIs(t, err, sinks.ErrUnknownType)

	_, err = sinks.NewRegistry(mk("file"), mk("json"), mk("file"))
	require.ErrorIs(t, err, sinks.ErrDuplicateType)
	require.ErrorContains(t, err, `"file"`)
	_, err = sinks.NewRegistry(sinks.Factory{Type: "x"})
	require.Error(t, err, "a factory without New")
}

func TestSecretNeverPrinted(t *testing.T) {
	t.Parallel()
	type cfg struct {
		API   string
		Token sinks.Secret
	}
	c := cfg{API: "https://api.github.com", Token: "s3cr3t-value"}
	j, err := json.Marshal(c)
	require.NoError(t, err)
	for _, out := range []string{
		//lint:ignore S1025 the %s verb is what is tested
		fmt.Sprint(c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c), fmt.Sprintf("%s", c.Token),
		fmt.Sprintf("%q", c.Token), fmt.Sprintf("%x", c.Token), string(j),
	} {
		require.NotContains(t, out, "s3cr3t")
	}
	require.Contains(t, fmt.Sprint(c), "[redacted]")
	require.Equal(t, "s3cr3t-value", c.Token.Reveal())
	require.Empty(t, sinks.Secret("").String(), "an unset secret shows as unset")
}

func TestSleepContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, sinks.SleepContext(ctx, 0))
	require.NoError(t, sinks.SleepContext(ctx, time.Microsecond))
	cancel()
	require.ErrorIs(t, sinks.SleepContext(ctx, time.Hour), context.Canceled)
}

func TestSettingsDefaults(t *testing.T) {
	t.Parallel()
	s := sinks.Settings{}.WithDefaults()
	require.NotNil(t, s.Now)
	require.NotNil(t, s.Sleep)
	require.NotNil(t, s.Stdout)
}

func TestCounters(t *testing.T) {
	t.Parallel()
	var c sinks.Counters
	require.Empty(t, c.Snapshot())
	c.Observe(sinks.Event{Sink: "a", Outcome: sinks.OutcomeRetrying, Err: errors.New("e1")})
	c.Observe(sinks.Event{Sink: "a", Outcome: sinks.OutcomeDelivered})
	c.Observe(sinks.Event{Sink: "b", Outcome: sinks.OutcomeFailed, Err: errors.New("e2")})
	c.Observe(sinks.Event{Sink: "b", Outcome: sinks.OutcomeDropped, Err: sinks.ErrQueueFull})
	c.Observe(sinks.Event{Sink: "c", Outcome: sinks.OutcomeDeferred, Err: sinks.ErrQueueFull})
	c.Observe(sinks.Event{Sink: "c", Outcome: sinks.OutcomeRequeued})
	c.Observe(sinks.Event{Sink: "c", Outcome: sinks.OutcomeWithdrawn})
	require.Equal(t, map[string]sinks.SinkCounts{
		"a": {Delivered: 1, Retries: 1, LastError: "e1"},
		"b": {Failed: 1, Dropped: 1, LastError: sinks.ErrQueueFull.Error()},
		"c": {Deferred: 1, Requeued: 1, Withdrawn: 1},
	}, c.Snapshot())
	for o, want := range map[sinks.Outcome]string{
		sinks.OutcomeDelivered: "delivered", sinks.OutcomeRetrying: "retrying",
		sinks.OutcomeFailed: "failed", sinks.OutcomeDropped: "dropped", sinks.OutcomeDeferred: "deferred",
		sinks.OutcomeRequeued: "requeued", sinks.OutcomeWithdrawn: "withdrawn", 0: "unknown",
	} {
		require.Equal(t, want, o.String())
	}
}

// Example_fanout writes reports to two sinks through a Fanout; one of them
// fails once and is retried.
func Example_fanout() {
	ctx := context.Background()
	files, comments := &sinktest.Memory{}, &sinktest.Memory{}
	comments.FailNext(errors.New("503 service unavailable"))

	var counts sinks.Counters
	f, err := sinks.NewFanout(sinks.Settings{}, sinks.FanoutConfig{
		Observer: &counts,
		Retry:    sinks.RetryPolicy{Initial: time.Millisecond, Max: time.Millisecond},
	},
		sinks.Target{Name: "file", Sink: files},
		sinks.Target{Name: "issue_comment", Sink: comments},
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, id := range []string{"run-1", "run-2"} {
		if err := f.Write(ctx, split.Report{Run: split.RunMeta{ID: id}}); err != nil {
			fmt.Println(err)
		}
	}
	if err := f.Close(ctx); err != nil {
		fmt.Println(err)
	}
	s := counts.Snapshot()
	fmt.Println("file:", len(files.Runs()), "delivered,", s["file"].Retries, "retries")
	fmt.Println("issue_comment:", len(comments.Runs()), "delivered,", s["issue_comment"].Retries, "retries")
	// Output:
	// file: 2 delivered, 0 retries
	// issue_comment: 2 delivered, 1 retries
}
