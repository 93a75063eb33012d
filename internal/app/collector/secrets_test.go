package collector

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/redact"
)

// TestRunRedactsSecretsIntegration wraps a child given secrets in its
// arguments, in every form: the child gets them unchanged, but the
// recorded command and argv (events, --out files) have them masked; the
// child's environment holds none of the collector's own secrets.
func TestRunRedactsSecretsIntegration(t *testing.T) {
	skipShort(t)
	t.Setenv("GTTSPLIT_NATS_TOKEN", "nats-secret-1")
	t.Setenv("GTTSPLIT_NATS_PASSWORD", "nats-secret-2")
	t.Setenv("GTTSPLIT_COMMENT_TOKEN", "comment-secret-3")
	t.Setenv("GTTSPLIT_SINKS_ISSUE_COMMENT_TOKEN", "comment-secret-4")
	t.Setenv("GTTSPLIT_NATS_URL", "nats://nats-token-5@127.0.0.1:1")
	t.Setenv("GTTSPLIT_SINKS_ISSUE_COMMENT_API", "https://bot:comment-pass-6@tracker.example/api/v1")
	t.Setenv("GTTSPLIT_LANE_NOTE", "kept")
	t.Setenv("GTTSPLIT_SPOOL_DIR", "/var/spool/gttsplit")
	rec := filepath.Join(t.TempDir(), "record.json")
	secrets := []string{"sk-arg-1", "sk-arg-2", "hf_arg_3", "pw-arg-4", "url-pass-5", "url-token-6", "kv-tok-7", "bearer-8", "basic-9"}
	argv := childArgv(t, "record="+rec, "--api-key", "sk-arg-1", "--api-key=sk-arg-2", "--hf-token", "hf_arg_3",
		"--db-password=pw-arg-4", "--model-url", "https://alice:url-pass-5@example.com/m.gguf",
		"-mu=https://url-token-6@example.com/m", "token=kv-tok-7", "--header", "Authorization: Bearer bearer-8",
		"-H", "Authorization: Basic basic-9", "--verbose")
	cfg := testConfig(t)
	cfg.Out = t.TempDir()
	var logs syncBuffer
	code, err := Run(testCtx(t), cfg, argv, newTestIO().io(), zerolog.New(&logs))
	require.NoError(t, err)
	require.Equal(t, 0, code)
	evs := readJSONL(t, filepath.Join(cfg.Out, "events.jsonl"))
	requireNoSecrets(t, cfg.Out, secrets)
	for _, s := range secrets {
		require.NotContains(t, logs.String(), s, "the log holds a secret")
	}

	r := readRecord(t, rec)
	require.Equal(t, argv[1:], r.Args, "the child gets its arguments unchanged")
	for _, k := range []string{"GTTSPLIT_NATS_TOKEN", "GTTSPLIT_NATS_PASSWORD", "GTTSPLIT_COMMENT_TOKEN", "GTTSPLIT_SINKS_ISSUE_COMMENT_TOKEN",
		"GTTSPLIT_NATS_URL", "GTTSPLIT_SINKS_ISSUE_COMMENT_API"} {
		_, ok := r.Lookup(k)
		require.False(t, ok, "%s reached the child", k)
	}
	v, ok := r.Lookup("GTTSPLIT_LANE_NOTE")
	require.True(t, ok)
	require.Equal(t, "kept", v)
	v, _ = r.Lookup("GTTSPLIT_SPOOL_DIR")
	require.Equal(t, "/var/spool/gttsplit", v, "a setting without credentials is kept")

	st := byType(evs, events.TypeRunStarted)
	require.Len(t, st, 1)
	args := st[0].Started.Detail.Args
	require.Contains(t, args, redact.Mask)
	require.Contains(t, args, "--api-key="+redact.Mask)
	require.Contains(t, args, "https://alice:"+redact.Mask+"@example.com/m.gguf")
	require.Contains(t, args, "token="+redact.Mask)
	require.Contains(t, args, "Authorization: Bearer "+redact.Mask)
	require.Contains(t, args, "Authorization: Basic "+redact.Mask)
	require.Contains(t, st[0].Started.Info.Command, "--hf-token '***'")
}

// requireNoSecrets fails when any file under dir holds one of secrets.
func requireNoSecrets(t *testing.T, dir string, secrets []string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, s := range secrets {
			require.NotContains(t, string(b), s, "%s holds a secret", p)
		}
		return nil
	}))
}
