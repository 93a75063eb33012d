// Package githubtest runs a local HTTP server that speaks the part of the
// GitHub REST API (and of Gitea/Forgejo's, under a base path such as
// /api/v1) the issue comment sink uses, with in-memory issues and comments:
//
//	GET   /repos/{owner}/{repo}/issues/{n}/comments   paginated, Link headers
//	POST  /repos/{owner}/{repo}/issues/{n}/comments
//	PATCH /repos/{owner}/{repo}/issues/comments/{id}
//
// Tests program failures (FailNext), and every request is recorded with its
// headers (Requests) so a test can check where a token went.
package githubtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// MaxBody is GitHub's limit on a comment body, in characters; longer bodies
// are refused with 422 as GitHub does.
const MaxBody = 65536

// Comment is one stored issue comment.
type Comment struct {
	ID        int64     `json:"id"`
	Body      string    `json:"body"`
	Issue     string    `json:"-"` // "owner/repo#n"
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	Edits     int       `json:"-"` // successful PATCHes
}

// Request is one recorded request.
type Request struct {
	Method   string
	Path     string // URL path as received, base path included
	RawQuery string
	Header   http.Header
	Body     string
}

// Failure is a canned answer for the next requests (see FailNext).
type Failure struct {
	Status int
	Header http.Header
	Body   string // JSON; a {"message": ...} object when empty
}

// RetryAfter answers status (403 or 429) with a Retry-After header.
func RetryAfter(status int, seconds int) Failure {
	return Failure{Status: status, Header: http.Header{"Retry-After": {strconv.Itoa(seconds)}}}
}

// RateLimitReset answers status with an exhausted primary rate limit that
// resets at reset (X-RateLimit-Remaining: 0, X-RateLimit-Reset: epoch).
func RateLimitReset(status int, reset time.Time) Failure {
	return Failure{Status: status, Header: http.Header{
		"X-Ratelimit-Limit":     {"5000"},
		"X-Ratelimit-Remaining": {"0"},
		"X-Ratelimit-Reset":     {strconv.FormatInt(reset.Unix(), 10)},
	}}
}

// Status answers with a bare status code.
func Status(code int) Failure { return Failure{Status: code} }

// Option configures a Server.
type Option func(*Server)

// WithBasePath serves the API under a prefix, as Gitea and Forgejo do
// ("/api/v1").
func WithBasePath(p string) Option { return func(s *Server) { s.base = strings.TrimSuffix(p, "/") } }

// WithToken makes the server answer 401 to requests whose Authorization is
// not "Bearer <token>".
func WithToken(token string) Option { return func(s *Server) { s.token = token } }

// WithListDelay delays every listing answer by d, widening the window in
// which a client without per-issue locking would create a second comment.
func WithListDelay(d time.Duration) Option { return func(s *Server) { s.listDelay = d } }

// Server is the fake API. Its methods are safe for concurrent use.
type Server struct {
	// URL is the API base URL to configure clients with (base path
	// included).
	URL string

	srv       *httptest.Server
	base      string
	token     string
	listDelay time.Duration

	mu       sync.Mutex
	issues   map[string][]*Comment // "owner/repo#n" → comments in creation order
	byID     map[int64]*Comment
	nextID   int64
	fails    []Failure
	requests []Request
	now      time.Time
}

// New starts a server; tb's cleanup closes it.
func New(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	s := Start(opts...)
	tb.Cleanup(s.Close)
	return s
}

// Start starts a server that the caller closes (Close), for harnesses that
// have no testing.TB, such as a testscript's setup.
func Start(opts ...Option) *Server {
	s := &Server{
		issues: make(map[string][]*Comment),
		byID:   make(map[int64]*Comment),
		nextID: 1000,
		now:    time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	for _, o := range opts {
		o(s)
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL + s.base
	return s
}

// Close shuts the server down. It is idempotent.
func (s *Server) Close() {
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// AddIssue creates an issue ("owner/repo#n") with no comments. Requests
// for issues never added are answered 404.
func (s *Server) AddIssue(issue string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.issues[issue]; !ok {
		s.issues[issue] = nil
	}
}

// AddComment stores a comment on issue (created if needed) as if someone
// had posted it, without a request.
func (s *Server) AddComment(issue, body string) Comment {
	s.mu.Lock()
	defer s.mu.Unlock()
	return *s.create(issue, body)
}

// DeleteComment removes a comment, as a person deleting it would.
func (s *Server) DeleteComment(id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.byID[id]
	if !ok {
		return
	}
	delete(s.byID, id)
	cs := s.issues[c.Issue]
	for i := range cs {
		if cs[i].ID == id {
			s.issues[c.Issue] = append(cs[:i:i], cs[i+1:]...)
			break
		}
	}
}

// Comments returns copies of issue's comments in creation order.
func (s *Server) Comments(issue string) []Comment {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Comment
	for _, c := range s.issues[issue] {
		out = append(out, *c)
	}
	return out
}

// FailNext answers the next n requests with f (after recording them).
func (s *Server) FailNext(n int, f Failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.fails = append(s.fails, f)
	}
}

// ClearFailures drops the failures FailNext programmed and no request
// used yet.
func (s *Server) ClearFailures() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fails = nil
}

// Requests returns every request received so far, in arrival order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Count returns how many recorded requests had this method.
func (s *Server) Count(method string) int {
	n := 0
	for _, r := range s.Requests() {
		if r.Method == method {
			n++
		}
	}
	return n
}

// create stores a comment; s.mu is held.
func (s *Server) create(issue, body string) *Comment {
	s.nextID++
	s.now = s.now.Add(time.Second)
	c := &Comment{ID: s.nextID, Body: body, Issue: issue, CreatedAt: s.now, UpdatedAt: s.now}
	s.issues[issue] = append(s.issues[issue], c)
	s.byID[c.ID] = c
	return c
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<22))
	s.mu.Lock()
	s.requests = append(s.requests, Request{
		Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery,
		Header: r.Header.Clone(), Body: string(body),
	})
	var fail *Failure
	if len(s.fails) > 0 {
		fail = &s.fails[0]
		s.fails = s.fails[1:]
	}
	s.mu.Unlock()

	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	if s.token != "" && r.Header.Get("Authorization") != "Bearer "+s.token {
		writeMessage(w, http.StatusUnauthorized, "Bad credentials")
		return
	}
	if fail != nil {
		for k, vs := range fail.Header {
			w.Header()[k] = vs
		}
		if fail.Body != "" {
			w.WriteHeader(fail.Status)
			_, _ = io.WriteString(w, fail.Body)
			return
		}
		writeMessage(w, fail.Status, http.StatusText(fail.Status))
		return
	}

	p, ok := strings.CutPrefix(r.URL.Path, s.base+"/repos/")
	if !ok {
		writeMessage(w, http.StatusNotFound, "Not Found")
		return
	}
	parts := strings.Split(p, "/")
	switch {
	case len(parts) == 5 && parts[2] == "issues" && parts[4] == "comments":
		issue := parts[0] + "/" + parts[1] + "#" + parts[3]
		switch r.Method {
		case http.MethodGet:
			s.list(w, r, issue)
		case http.MethodPost:
			s.post(w, issue, body)
		default:
			writeMessage(w, http.StatusMethodNotAllowed, "Method Not Allowed")
		}
	case len(parts) == 5 && parts[2] == "issues" && parts[3] == "comments" && r.Method == http.MethodPatch:
		id, err := strconv.ParseInt(parts[4], 10, 64)
		if err != nil {
			writeMessage(w, http.StatusNotFound, "Not Found")
			return
		}
		s.patch(w, parts[0]+"/"+parts[1], id, body)
	default:
		writeMessage(w, http.StatusNotFound, "Not Found")
	}
}

func (s *Server) list(w http.ResponseWriter, r *http.Request, issue string) {
	if s.listDelay > 0 {
		time.Sleep(s.listDelay)
	}
	q := r.URL.Query()
	perPage := 30
	if v, err := strconv.Atoi(q.Get("per_page")); err == nil && v > 0 {
		perPage = min(v, 100)
	}
	page := 1
	if v, err := strconv.Atoi(q.Get("page")); err == nil && v > 0 {
		page = v
	}
	s.mu.Lock()
	all, ok := s.issues[issue]
	var chunk []Comment
	for i := (page - 1) * perPage; ok && i < len(all) && i < page*perPage; i++ {
		chunk = append(chunk, *all[i])
	}
	total := len(all)
	s.mu.Unlock()
	if !ok {
		writeMessage(w, http.StatusNotFound, "Not Found")
		return
	}
	last := max(1, (total+perPage-1)/perPage)
	link := func(n int, rel string) string {
		return fmt.Sprintf(`<http://%s%s?per_page=%d&page=%d>; rel="%s"`, r.Host, r.URL.Path, perPage, n, rel)
	}
	var links []string
	if page < last {
		links = append(links, link(page+1, "next"), link(last, "last"))
	}
	if page > 1 {
		links = append(links, link(1, "first"), link(page-1, "prev"))
	}
	if len(links) > 0 {
		w.Header().Set("Link", strings.Join(links, ", "))
	}
	if chunk == nil {
		chunk = []Comment{}
	}
	writeJSON(w, http.StatusOK, chunk)
}

func (s *Server) post(w http.ResponseWriter, issue string, body []byte) {
	text, ok := s.validBody(w, body)
	if !ok {
		return
	}
	s.mu.Lock()
	if _, exists := s.issues[issue]; !exists {
		s.mu.Unlock()
		writeMessage(w, http.StatusNotFound, "Not Found")
		return
	}
	c := *s.create(issue, text)
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, c)
}

func (s *Server) patch(w http.ResponseWriter, repo string, id int64, body []byte) {
	text, ok := s.validBody(w, body)
	if !ok {
		return
	}
	s.mu.Lock()
	c, exists := s.byID[id]
	if !exists || !strings.HasPrefix(c.Issue, repo+"#") {
		s.mu.Unlock()
		writeMessage(w, http.StatusNotFound, "Not Found")
		return
	}
	s.now = s.now.Add(time.Second)
	c.Body, c.UpdatedAt = text, s.now
	c.Edits++
	out := *c
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

// validBody checks a {"body": ...} payload as GitHub does.
func (s *Server) validBody(w http.ResponseWriter, body []byte) (string, bool) {
	var in struct {
		Body *string `json:"body"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		writeMessage(w, http.StatusBadRequest, "Problems parsing JSON")
		return "", false
	}
	if in.Body == nil || *in.Body == "" {
		writeMessage(w, http.StatusUnprocessableEntity, "Validation Failed: body is missing")
		return "", false
	}
	if utf8.RuneCountInString(*in.Body) > MaxBody {
		writeMessage(w, http.StatusUnprocessableEntity, "Validation Failed: body is too long (maximum is 65536 characters)")
		return "", false
	}
	return *in.Body, true
}

func writeMessage(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"message": msg, "documentation_url": "https://docs.github.com/rest"})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
