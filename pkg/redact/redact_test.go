package redact

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestArgs(t *testing.T) {
	r, err := New(DefaultFlagPattern)
	require.NoError(t, err)
	for name, tc := range map[string]struct{ in, want []string }{
		"--api-key X":        {[]string{"llama-server", "--api-key", "sk-123", "-m", "m.gguf"}, []string{"llama-server", "--api-key", Mask, "-m", "m.gguf"}},
		"--api-key=X":        {[]string{"llama-server", "--api-key=sk-123", "-c", "256"}, []string{"llama-server", "--api-key=" + Mask, "-c", "256"}},
		"--hf-token X":       {[]string{"llama-cli", "--hf-token", "hf_abc", "-hf", "org/m"}, []string{"llama-cli", "--hf-token", Mask, "-hf", "org/m"}},
		"-hft X":             {[]string{"llama-cli", "-hft", "hf_abc"}, []string{"llama-cli", "-hft", Mask}},
		"--my-secret=X":      {[]string{"x", "--my-secret=s3"}, []string{"x", "--my-secret=" + Mask}},
		"--db-password X":    {[]string{"x", "--db-password", "p w"}, []string{"x", "--db-password", Mask}},
		"--PASSWD=X":         {[]string{"x", "--PASSWD=p"}, []string{"x", "--PASSWD=" + Mask}},
		"-token X":           {[]string{"x", "-token", "t"}, []string{"x", "-token", Mask}},
		"--ssl-key-file X":   {[]string{"x", "--ssl-key-file", "/k.pem"}, []string{"x", "--ssl-key-file", Mask}},
		"user:pass@ URL":     {[]string{"x", "--model-url", "https://alice:s3cret@example.com/m.gguf"}, []string{"x", "--model-url", "https://alice:" + Mask + "@example.com/m.gguf"}},
		"token@ URL":         {[]string{"x", "-mu=https://ghp_tok@example.com/m"}, []string{"x", "-mu=https://" + Mask + "@example.com/m"}},
		"flag last":          {[]string{"x", "--api-key"}, []string{"x", "--api-key"}},
		"not secret":         {[]string{"llama-cli", "-m", "m.gguf", "--cache-type-k", "q8_0", "-n", "-1", "--keep", "4", "-ctk", "f16"}, []string{"llama-cli", "-m", "m.gguf", "--cache-type-k", "q8_0", "-n", "-1", "--keep", "4", "-ctk", "f16"}},
		"program not a flag": {[]string{"--token-tool", "a"}, []string{"--token-tool", "a"}},
		"email is not a URL": {[]string{"x", "--author", "a@b.c"}, []string{"x", "--author", "a@b.c"}},
		"token=X":            {[]string{"x", "token=tk-1", "HF_TOKEN=hf_2", "api_key=k3"}, []string{"x", "token=" + Mask, "HF_TOKEN=" + Mask, "api_key=" + Mask}},
		"env TOKEN=X cmd":    {[]string{"env", "GITHUB_TOKEN=gh-1", "llama-server"}, []string{"env", "GITHUB_TOKEN=" + Mask, "llama-server"}},
		"--env=API_KEY=X":    {[]string{"x", "--env=API_KEY=k", "-e", "DB_PASSWORD=p"}, []string{"x", "--env=API_KEY=" + Mask, "-e", "DB_PASSWORD=" + Mask}},
		"name=value kept":    {[]string{"x", "mode=fast", "n=3", "=token", "a.b=c"}, []string{"x", "mode=fast", "n=3", "=token", "a.b=c"}},
		"-H Authorization: Bearer X": {[]string{"curl", "-H", "Authorization: Bearer abc.def-1", "--header", "authorization:Basic dXNlcjpwdw=="},
			[]string{"curl", "-H", "Authorization: Bearer " + Mask, "--header", "authorization:Basic " + Mask}},
		"--header=Authorization: X": {[]string{"x", "--header=Authorization: token ghp_1", "--header=Proxy-Authorization: opaque-2"},
			[]string{"x", "--header=Authorization: token " + Mask, "--header=Proxy-Authorization: " + Mask}},
		"lone Bearer X": {[]string{"x", "--auth", "Bearer abc", "basic Zm9v"}, []string{"x", "--auth", "Bearer " + Mask, "basic " + Mask}},
		"X-Api-Key: X":  {[]string{"x", "-H", "X-Api-Key: k-1", "-H", "Accept: application/json"}, []string{"x", "-H", "X-Api-Key: " + Mask, "-H", "Accept: application/json"}},
		"prompt kept (a lone two-word Basic X is taken for a credential)": {[]string{"llama-cli", "-p", "The bearer of basic news: token counts", "-p", "Basic math"},
			[]string{"llama-cli", "-p", "The bearer of basic news: token counts", "-p", "Basic " + Mask}},
		"model names kept": {[]string{"llama-server", "--override-kv", "tokenizer.ggml.add_bos_token=bool:false", "-ot", "token_embd.weight=CPU", "--override-tensor=token_embd.weight=CPU"},
			[]string{"llama-server", "--override-kv", "tokenizer.ggml.add_bos_token=bool:false", "-ot", "token_embd.weight=CPU", "--override-tensor=token_embd.weight=CPU"}},
	} {
		t.Run(name, func(t *testing.T) {
			in := append([]string(nil), tc.in...)
			require.Equal(t, tc.want, r.Args(tc.in))
			require.Equal(t, in, tc.in, "argv is not modified")
		})
	}
}

func TestCustomPattern(t *testing.T) {
	r, err := New(`^(api-key|foo)$`)
	require.NoError(t, err)
	require.Equal(t, []string{"x", "--foo", Mask, "--hf-token", "t"}, r.Args([]string{"x", "--foo", "v", "--hf-token", "t"}))
	r, err = New("")
	require.NoError(t, err)
	require.Equal(t, []string{"x", "--api-key", "k", "nats://" + Mask + "@h"}, r.Args([]string{"x", "--api-key", "k", "nats://tok@h"}))
	_, err = New("(")
	require.Error(t, err)
}

func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats://TOKEN@host:4222":                       "nats://" + Mask + "@host:4222",
		"nats://u:p@h1:4222,nats://t@h2:4222":          "nats://u:" + Mask + "@h1:4222,nats://" + Mask + "@h2:4222",
		"https://api.github.com":                       "https://api.github.com",
		"https://x-access-token:ghs_1@git.example/api": "https://x-access-token:" + Mask + "@git.example/api",
		`Get "https://a:b@h/x": dial tcp`:              `Get "https://a:` + Mask + `@h/x": dial tcp`,
		"user@host":                                    "user@host",
	} {
		require.Equal(t, want, URL(in), in)
	}
}

func TestURLList(t *testing.T) {
	for in, want := range map[string]string{
		"nats://TOKEN@h1:4222, nats://u:p@h2:4222": "nats://" + Mask + "@h1:4222, nats://u:" + Mask + "@h2:4222",
		"TOKEN@h1:4222,u:p@h2":                     Mask + "@h1:4222,u:" + Mask + "@h2",
		"nats://h1:4222,h2":                        "nats://h1:4222,h2",
		"":                                         "",
	} {
		require.Equal(t, want, URLList(in), in)
	}
}
