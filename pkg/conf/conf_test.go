package conf_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/conf"
)

func TestSecretNeverPrinted(t *testing.T) {
	t.Parallel()
	type cfg struct {
		API   string
		Token conf.Secret
	}
	c := cfg{API: "https://api.github.com", Token: "s3cr3t-value"}
	j, err := json.Marshal(c)
	require.NoError(t, err)
	text, err := c.Token.MarshalText()
	require.NoError(t, err)
	for _, out := range []string{
		//lint:ignore S1025 the %s verb is what is tested
		fmt.Sprint(c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c), fmt.Sprintf("%s", c.Token),
		fmt.Sprintf("%q", c.Token), fmt.Sprintf("%x", c.Token), string(j), string(text),
	} {
		require.NotContains(t, out, "s3cr3t")
	}
	require.Contains(t, fmt.Sprint(c), "[redacted]")
	require.Equal(t, "s3cr3t-value", c.Token.Reveal())
	require.Empty(t, conf.Secret("").String(), "an unset secret shows as unset")
}

// TestWithin: a section's problems get its key path; a problem of the
// section as a whole gets the path alone; an error that is no FieldError
// is one problem of the section.
func TestWithin(t *testing.T) {
	t.Parallel()
	var p conf.Problems
	p.Add("url", "%q is not a URL", "x")
	p.Add("", "at most one auth method may be set")
	p.Positive("connect_timeout", 0)
	err := fmt.Errorf("wrapped: %w", p.Err())
	var got []string
	for _, fe := range conf.Within("nats", err) {
		got = append(got, fe.Error())
	}
	require.Equal(t, []string{
		`nats.url: "x" is not a URL`,
		"nats: at most one auth method may be set",
		"nats.connect_timeout: must be a positive duration, got 0s",
	}, got)
	require.Equal(t, []string{"url", "", "connect_timeout"}, keys(conf.Within("", p.Err())))
	require.Equal(t, []string{"sinks.file"}, keys(conf.Within("sinks.file", errors.New("boom"))))
	require.Nil(t, conf.Within("x", nil))
	require.NoError(t, conf.Problems(nil).Err())
}

func keys(fs []*conf.FieldError) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Key)
	}
	return out
}

func TestChecks(t *testing.T) {
	t.Parallel()
	require.NoError(t, conf.Listen(":0"))
	require.NoError(t, conf.Listen("[::1]:8080"))
	require.EqualError(t, conf.Listen("8080"), `"8080" is not host:port`)
	require.EqualError(t, conf.Listen("h:http"), `port "http" is not a number from 0 to 65535`)
	require.True(t, conf.IsLoopbackListen("localhost:1"))
	require.True(t, conf.IsLoopbackListen("127.0.0.2:1"))
	require.False(t, conf.IsLoopbackListen(":1"))
	require.False(t, conf.IsLoopbackListen("10.0.0.1:1"))
	require.EqualError(t, conf.Name("a.b"), `"a.b" must not contain '.'`)
	require.EqualError(t, conf.Name(""), "must not be empty")
	require.EqualError(t, conf.Token("a b", 8), `"a b" must be letters, digits, '-' or '_'`)
	require.EqualError(t, conf.Token("abcdefghi", 8), `"abcdefghi" is 9 bytes long, at most 8`)
	require.EqualError(t, conf.Host("a\tb", 10), `"a\tb" must not contain '\t'`)
	require.EqualError(t, conf.HTTPURL("ftp://u:pw@h"), `"ftp://u:***@h" is not an http or https URL`)
}
