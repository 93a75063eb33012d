package githubtest_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gttsplit/gttsplit/pkg/sinks/commentsink/githubtest"
	"github.com/stretchr/testify/require"
)

func get(t *testing.T, url, token string) (*http.Response, []githubtest.Comment) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var cs []githubtest.Comment
	if resp.StatusCode == http.StatusOK {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&cs))
	}
	return resp, cs
}

func TestPaginationAndFailures(t *testing.T) {
	t.Parallel()
	s := githubtest.New(t, githubtest.WithToken("tok"), githubtest.WithBasePath("/api/v1"))
	for range 5 {
		s.AddComment("o/r#1", "x")
	}
	url := s.URL + "/repos/o/r/issues/1/comments?per_page=2"
	var ids []int64
	for pages := 0; url != ""; pages++ {
		require.Less(t, pages, 3)
		resp, cs := get(t, url, "tok")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		for _, c := range cs {
			ids = append(ids, c.ID)
		}
		url = ""
		for part := range strings.SplitSeq(resp.Header.Get("Link"), ",") {
			if strings.Contains(part, `rel="next"`) {
				url = strings.Trim(strings.TrimSpace(strings.Split(part, ";")[0]), "<>")
			}
		}
	}
	require.Len(t, ids, 5)

	resp, _ := get(t, s.URL+"/repos/o/r/issues/1/comments", "wrong")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, _ = get(t, s.URL+"/repos/o/r/issues/2/comments", "tok")
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "unknown issue")

	reset := time.Unix(1_800_000_000, 0)
	s.FailNext(1, githubtest.RateLimitReset(http.StatusTooManyRequests, reset))
	s.FailNext(1, githubtest.RetryAfter(http.StatusForbidden, 12))
	resp, _ = get(t, s.URL+"/repos/o/r/issues/1/comments", "tok")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, "0", resp.Header.Get("X-RateLimit-Remaining"))
	require.Equal(t, "1800000000", resp.Header.Get("X-RateLimit-Reset"))
	resp, _ = get(t, s.URL+"/repos/o/r/issues/1/comments", "tok")
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Equal(t, "12", resp.Header.Get("Retry-After"))
	resp, _ = get(t, s.URL+"/repos/o/r/issues/1/comments", "tok")
	require.Equal(t, http.StatusOK, resp.StatusCode, "failures are used up")

	reqs := s.Requests()
	require.Len(t, reqs, 8)
	require.Equal(t, "Bearer tok", reqs[0].Header.Get("Authorization"))
	require.Equal(t, "/api/v1/repos/o/r/issues/1/comments", reqs[0].Path)
}

func TestPostPatchValidation(t *testing.T) {
	t.Parallel()
	s := githubtest.New(t)
	s.AddIssue("o/r#1")
	do := func(method, path, body string) int {
		req, err := http.NewRequest(method, s.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusCreated, do(http.MethodPost, "/repos/o/r/issues/1/comments", `{"body":"hello"}`))
	id := s.Comments("o/r#1")[0].ID
	require.Equal(t, http.StatusOK, do(http.MethodPatch, "/repos/o/r/issues/comments/"+itoa(id), `{"body":"edited"}`))
	require.Equal(t, "edited", s.Comments("o/r#1")[0].Body)
	require.Equal(t, 1, s.Comments("o/r#1")[0].Edits)

	long, _ := json.Marshal(map[string]string{"body": strings.Repeat("é", githubtest.MaxBody+1)})
	require.Equal(t, http.StatusUnprocessableEntity, do(http.MethodPost, "/repos/o/r/issues/1/comments", string(long)))
	atLimit, _ := json.Marshal(map[string]string{"body": strings.Repeat("é", githubtest.MaxBody)})
	require.Equal(t, http.StatusCreated, do(http.MethodPost, "/repos/o/r/issues/1/comments", string(atLimit)))
	require.Equal(t, http.StatusUnprocessableEntity, do(http.MethodPost, "/repos/o/r/issues/1/comments", `{"body":""}`))
	require.Equal(t, http.StatusNotFound, do(http.MethodPost, "/repos/o/r/issues/9/comments", `{"body":"x"}`))
	require.Equal(t, http.StatusNotFound, do(http.MethodPatch, "/repos/o/r/issues/comments/1", `{"body":"x"}`))
	require.Equal(t, http.StatusNotFound, do(http.MethodPatch, "/repos/other/r/issues/comments/"+itoa(id), `{"body":"x"}`), "comment of another repo")
	s.DeleteComment(id)
	require.Len(t, s.Comments("o/r#1"), 1)
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }
