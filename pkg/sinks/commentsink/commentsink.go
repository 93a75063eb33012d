// Package commentsink posts each run's Markdown split as a comment on the
// run's tracker issue, through the GitHub REST API or a Gitea/Forgejo
// server (same paths under a base URL such as https://gitea.example/api/v1).
//
// # Issue and comment
//
// The issue is the report's run issue ("OWNER/REPO#N"), else the configured
// default_issue; a run with neither is skipped. A run has exactly one
// comment, found by the hidden marker "<!-- gttsplit run=ID -->" on its
// first line: the sink lists the issue's comments over every page (following
// Link rel="next"), edits the comment when its body changed, leaves it alone
// when it did not, and creates one only when none exists. Writes to one
// issue are serialised, so the lookup and the creation are atomic per issue
// within one process. The body is kept under 65,536 characters: a longer
// report is cut and a note says so, the marker is kept.
//
// # Sticky comments
//
// Sticky keeps one comment per key on an issue that is not a run's: the
// aggregator's "lane changes" comment of a host, lane and model file,
// found by the marker "<!-- gttsplit lane=KEY -->" and edited in place.
// Its caller retries it (with the same classification of errors) and
// remembers the comment's id across restarts.
//
// # Errors and retries
//
// Write makes one attempt; a Fanout retries. 403 and 429 are transient with
// the delay the server asked for (sinks.RetryAfter): Retry-After seconds,
// else the X-RateLimit-Reset time when X-RateLimit-Remaining is 0, else one
// minute. 5xx answers, network errors and 401 (the token refused: revoked,
// expired, the tracker's auth down; the comment waits until it works
// again) are transient (the Fanout's exponential backoff). 404, 422 and
// other 4xx answers are permanent and name the issue.
//
// # Token
//
// The token (Config.Token: the key sinks.issue_comment.token, set through
// GTTSPLIT_COMMENT_TOKEN) is sent only in the Authorization header of
// requests to the configured API host, never logged, never part of an error
// and never printed by a dry run. A pagination link to another host is
// refused.
package commentsink

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gttsplit/gttsplit/pkg/conf"
	"github.com/gttsplit/gttsplit/pkg/redact"
	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/sinks/internal/gate"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/gttsplit/gttsplit/pkg/split/present"
	"github.com/rs/zerolog"
)

const (
	typeName   = "issue_comment"
	userAgent  = "gttsplit-issue-comment-sink/1"
	maxPages   = 1000    // 100,000 comments at 100 per page
	maxRespLen = 1 << 24 // a page of 100 maximal comments is ~6.5 MB
	perPage    = 100
)

// Config is the sinks.issue_comment.* keys. The sink is on when API is
// set: the zero Config is off (DefaultConfig only sets Timeout).
type Config struct {
	// API is the REST API base URL: https://api.github.com for GitHub, or
	// a Gitea/Forgejo server's https://HOST/api/v1.
	API string `mapstructure:"api" flag:"comment-api" desc:"issue tracker API base URL (e.g. https://api.github.com), the token read from GTTSPLIT_COMMENT_TOKEN; empty disables the comment sink"`
	// DefaultIssue ("OWNER/REPO#N") receives the reports of runs that name
	// no issue; empty skips them.
	DefaultIssue string `mapstructure:"default_issue" flag:"comment-issue" desc:"issue OWNER/REPO#N for runs that name none"`
	// DryRun prints what would be posted instead of calling the API.
	DryRun bool `mapstructure:"dry_run" flag:"comment-dry-run" desc:"print what would be posted instead of posting it"`
	// Token authenticates to the API (Authorization: Bearer); it prints
	// as "[redacted]".
	Token conf.Secret `mapstructure:"token" env:"GTTSPLIT_COMMENT_TOKEN" desc:"API token of the comment sink; never printed"`
	// Timeout bounds one HTTP request.
	Timeout time.Duration `mapstructure:"timeout" desc:"time one request to the tracker API may take"`
}

// DefaultConfig returns the defaults of the sinks.issue_comment.* keys:
// off, a 30 s request timeout.
func DefaultConfig() Config { return Config{Timeout: 30 * time.Second} }

// Enabled reports whether c switches the sink on.
func (c Config) Enabled() bool { return c.API != "" }

// Validate reports every problem of c (conf.FieldError, keys relative to
// sinks.issue_comment.*). It does not touch the network.
func (c Config) Validate() error {
	var p conf.Problems
	if c.API != "" {
		if err := conf.HTTPURL(c.API); err != nil {
			p.Check("api", err)
		} else if u, _ := url.Parse(c.API); u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			why := ""
			if u.User != nil {
				why = " (credentials do not belong in it: the token comes from GTTSPLIT_COMMENT_TOKEN)"
			}
			p.Add("api", "%q is not an http(s) base URL%s", redact.URL(c.API), why)
		}
		if c.Token == "" && !c.DryRun {
			p.Add("token", "must be set when sinks.issue_comment.api is (GTTSPLIT_COMMENT_TOKEN), unless sinks.issue_comment.dry_run")
		}
	}
	if c.DefaultIssue != "" {
		_, _, _, err := ParseIssue(c.DefaultIssue)
		p.Check("default_issue", err)
	}
	p.Positive("timeout", c.Timeout)
	return p.Err()
}

// New builds the comment sink of cfg, which must be valid and on
// (Enabled).
func New(cfg Config, set sinks.Settings) (*Sink, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.Enabled() {
		return nil, errors.New("api: must not be empty")
	}
	api, _ := url.Parse(strings.TrimSuffix(cfg.API, "/"))
	var transport *http.Transport
	if t, ok := http.DefaultTransport.(*http.Transport); ok {
		transport = t.Clone()
	} else {
		transport = &http.Transport{Proxy: http.ProxyFromEnvironment}
	}
	set = set.WithDefaults()
	s := &Sink{
		cfg:    cfg,
		api:    api,
		client: &http.Client{Transport: transport, Timeout: cfg.Timeout},
		set:    set,
		log:    set.Logger.With().Str("component", "sink").Str("sink", typeName).Logger(),
		locks:  make(map[string]chan struct{}),
		posted: make(map[postKey]posted),

		reports: make(map[string]split.Report),
	}
	s.gate = gate.New(func() error { transport.CloseIdleConnections(); return nil })
	return s, nil
}

// Sink is the issue comment sink.
type Sink struct {
	cfg    Config
	api    *url.URL
	client *http.Client
	set    sinks.Settings
	log    zerolog.Logger
	gate   *gate.Gate

	// Lock order: an issue's semaphore (locks), then mu or outMu, one at
	// a time (post holds its issue's); mu is never held while a
	// semaphore is awaited or outMu is taken.
	mu     sync.Mutex
	locks  map[string]chan struct{} // issue → one-slot semaphore
	posted map[postKey]posted       // what this process last left on the issue
	// reports are the latest splits written (at most maxSeen, oldest
	// first in order), for control comparisons.
	reports map[string]split.Report
	order   []string
	outMu   sync.Mutex // serialises dry-run output
}

// Interface guard.
var _ sinks.Sink = (*Sink)(nil)

// postKey names a comment the sink left on an issue: a run's (run) or a
// sticky comment's (its key).
type postKey struct{ issue, run, sticky string }

// posted remembers a comment this sink created or edited.
type posted struct {
	id  int64 // 0 in dry run
	sum [sha256.Size]byte
}

// maxPosted bounds the memory of posted comments; beyond it the memory is
// dropped and the next write of a run lists the issue again.
const maxPosted = 10000

// Write posts or edits r's comment on its issue. When r names the run it
// is the control of (collector run --control-of) and that run's split is
// known, the comment ends with the comparison of the two; when r is a run
// that a split seen earlier names as its control target, that split's
// comment is written again, now with the comparison.
func (s *Sink) Write(ctx context.Context, r split.Report) error {
	if err := s.gate.Enter(); err != nil {
		return err
	}
	defer s.gate.Exit()
	if err := ctx.Err(); err != nil {
		return err
	}
	s.seen(r)
	if err := s.post(ctx, r); err != nil {
		return err
	}
	for _, c := range s.controlsOf(r.Run.ID) {
		if err := s.post(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// maxSeen bounds the splits the sink remembers for control comparisons.
const maxSeen = 1000

// seen remembers r for the comparisons of its control pair.
func (s *Sink) seen(r split.Report) {
	if r.Run.ID == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.reports[r.Run.ID]; !ok {
		s.order = append(s.order, r.Run.ID)
		if len(s.order) > maxSeen {
			delete(s.reports, s.order[0])
			s.order = s.order[1:]
		}
	}
	s.reports[r.Run.ID] = r
}

// controlsOf returns the remembered splits that name id as the run they
// are the control of.
func (s *Sink) controlsOf(id string) []split.Report {
	if id == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []split.Report
	for _, k := range s.order {
		if c := s.reports[k]; c.Run.ControlOf == id && k != id {
			out = append(out, c)
		}
	}
	return out
}

// body is r's Markdown, with the comparison to the run r is the control
// of when that run's split is known.
func (s *Sink) body(ctx context.Context, r split.Report) string {
	md := present.Markdown(r)
	id := r.Run.ControlOf
	if id == "" {
		return md
	}
	s.mu.Lock()
	main, ok := s.reports[id]
	s.mu.Unlock()
	if !ok && s.set.Lookup != nil {
		var err error
		main, ok, err = s.set.Lookup(ctx, id)
		if err != nil {
			s.log.Debug().Err(err).Str("run_id", id).Msg("split of the controlled run not read")
		}
	}
	if !ok {
		return md
	}
	return md + "\n" + present.CompareMarkdown(present.Compare(main, r, id, r.Run.ID))
}

// post posts or edits r's comment.
func (s *Sink) post(ctx context.Context, r split.Report) error {
	ref := r.Run.Issue
	if ref == "" {
		ref = s.cfg.DefaultIssue
	}
	if ref == "" {
		s.log.Debug().Str("run_id", r.Run.ID).Msg("no issue, comment skipped")
		return nil
	}
	iss, err := parseIssue(ref)
	if err != nil {
		return sinks.Permanent(fmt.Errorf("issue comment sink: run %q: %w", r.Run.ID, err))
	}
	mark := marker(r.Run.ID)
	text := compose(mark, s.body(ctx, r), maxBody)
	sum := sha256.Sum256([]byte(text))
	key := postKey{issue: iss.key(), run: r.Run.ID}

	unlock, err := s.lock(ctx, iss.key())
	if err != nil {
		return err
	}
	defer unlock()

	s.mu.Lock()
	prev, known := s.posted[key]
	s.mu.Unlock()
	if known && prev.sum == sum {
		return nil
	}
	if s.cfg.DryRun {
		s.dryRun(iss, r.Run.ID, text)
		s.remember(key, posted{sum: sum})
		return nil
	}

	if known && prev.id != 0 {
		err := s.edit(ctx, iss, prev.id, text)
		if err == nil {
			s.remember(key, posted{id: prev.id, sum: sum})
			s.log.Debug().Str("run_id", r.Run.ID).Stringer("issue", iss).Int64("comment_id", prev.id).Msg("comment edited")
			return nil
		}
		if !errors.Is(err, errNotFound) {
			return err
		}
		// Deleted since: look it up again below.
		s.forget(key)
	}

	found, err := s.find(ctx, iss, mark)
	if err != nil {
		return err
	}
	switch {
	case found == nil:
		id, err := s.create(ctx, iss, text)
		if err != nil {
			return err
		}
		s.remember(key, posted{id: id, sum: sum})
		s.log.Debug().Str("run_id", r.Run.ID).Stringer("issue", iss).Int64("comment_id", id).Msg("comment created")
	case strings.ReplaceAll(found.Body, "\r\n", "\n") == text:
		s.remember(key, posted{id: found.ID, sum: sum})
	default:
		if err := s.edit(ctx, iss, found.ID, text); err != nil {
			return err
		}
		s.remember(key, posted{id: found.ID, sum: sum})
		s.log.Debug().Str("run_id", r.Run.ID).Stringer("issue", iss).Int64("comment_id", found.ID).Msg("comment edited")
	}
	return nil
}

// ErrNotKept is Sticky's error when keep refused the write: nothing was
// written.
var ErrNotKept = errors.New("not kept: the write is no longer this aggregator's")

// Sticky keeps body as the one comment of key on issue ref (OWNER/REPO#N):
// the comment whose first line is the hidden marker "<!-- gttsplit
// lane=KEY -->", edited when its body differs, left alone when it does
// not, created when the issue has none. known is the comment's id from an
// earlier call (0: none known): it is edited at once, and looked up again
// only when it is gone; when this sink last left this very body there
// (the caller asks again: its record of the write was not written),
// nothing is written. keep, if not nil, is asked right before each
// write (an edit or a creation); when it says no, nothing is written and
// the error is ErrNotKept. It returns the comment's id (0 in a dry run).
//
// Sticky makes one attempt; its errors are classified as Write's
// (sinks.Permanent, sinks.RetryAfter for a rate limit, transient
// otherwise), for the caller to retry with its backoff. The body is kept
// under the size limit as a run's report is.
func (s *Sink) Sticky(ctx context.Context, ref, key, body string, known int64, keep func() bool) (int64, error) {
	if err := s.gate.Enter(); err != nil {
		return 0, err
	}
	defer s.gate.Exit()
	iss, err := parseIssue(ref)
	if err != nil {
		return 0, sinks.Permanent(fmt.Errorf("issue comment sink: %s: %w", key, err))
	}
	mark := stickyMarker(key)
	text := compose(mark, body, maxBody)
	sum := sha256.Sum256([]byte(text))
	pk := postKey{issue: iss.key(), sticky: key}
	unlock, err := s.lock(ctx, iss.key())
	if err != nil {
		return 0, err
	}
	defer unlock()
	s.mu.Lock()
	prev, left := s.posted[pk]
	s.mu.Unlock()
	if known != 0 && left && prev.id == known && prev.sum == sum {
		return known, nil
	}
	kept := func() error {
		if keep != nil && !keep() {
			return fmt.Errorf("issue %s: %s: %w", iss, key, ErrNotKept)
		}
		return nil
	}
	if s.cfg.DryRun {
		if err := kept(); err != nil {
			return 0, err
		}
		s.outMu.Lock()
		defer s.outMu.Unlock()
		fmt.Fprintf(s.set.Stdout, "dry run: would keep the comment of %s on %s (%d bytes):\n%s\n-- end of comment --\n", key, iss, len(text), text)
		return 0, nil
	}
	if known != 0 {
		if err := kept(); err != nil {
			return 0, err
		}
		err := s.edit(ctx, iss, known, text)
		if err == nil {
			s.remember(pk, posted{id: known, sum: sum})
			return known, nil
		}
		if !errors.Is(err, errNotFound) {
			return 0, err
		}
		// Deleted since: look it up again.
		s.forget(pk)
	}
	found, err := s.find(ctx, iss, mark)
	if err != nil {
		return 0, err
	}
	switch {
	case found == nil:
		if err := kept(); err != nil {
			return 0, err
		}
		id, err := s.create(ctx, iss, text)
		if err != nil {
			return 0, err
		}
		s.log.Debug().Str("key", key).Stringer("issue", iss).Int64("comment_id", id).Msg("sticky comment created")
		s.remember(pk, posted{id: id, sum: sum})
		return id, nil
	case strings.ReplaceAll(found.Body, "\r\n", "\n") == text:
		s.remember(pk, posted{id: found.ID, sum: sum})
		return found.ID, nil
	}
	if err := kept(); err != nil {
		return 0, err
	}
	if err := s.edit(ctx, iss, found.ID, text); err != nil {
		return 0, err
	}
	s.remember(pk, posted{id: found.ID, sum: sum})
	return found.ID, nil
}

// Close waits for writes in flight (bounded by ctx) and closes idle
// connections. It is idempotent.
func (s *Sink) Close(ctx context.Context) error { return s.gate.Close(ctx) }

// lock takes issue's semaphore, or returns ctx's error.
func (s *Sink) lock(ctx context.Context, issue string) (func(), error) {
	s.mu.Lock()
	ch, ok := s.locks[issue]
	if !ok {
		ch = make(chan struct{}, 1)
		s.locks[issue] = ch
	}
	s.mu.Unlock()
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *Sink) remember(k postKey, p posted) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.posted) >= maxPosted {
		clear(s.posted)
	}
	s.posted[k] = p
}

func (s *Sink) forget(k postKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.posted, k)
}

func (s *Sink) dryRun(iss issue, run, text string) {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	fmt.Fprintf(s.set.Stdout, "dry run: would comment on %s for run %q (%d bytes):\n%s\n-- end of comment --\n", iss, run, len(text), text)
}

// comment is the part of an API comment the sink reads.
type comment struct {
	ID   int64  `json:"id"`
	Body string `json:"body"`
}

// find returns the issue's first comment whose body starts with mark, or
// nil, listing every page.
func (s *Sink) find(ctx context.Context, iss issue, mark string) (*comment, error) {
	next := s.endpoint(iss.commentsPath()) + "?per_page=" + strconv.Itoa(perPage)
	seen := make(map[string]bool)
	for page := 0; next != ""; page++ {
		if page == maxPages {
			return nil, sinks.Permanent(fmt.Errorf("issue %s: more than %d pages of comments", iss, maxPages))
		}
		seen[next] = true
		var cs []comment
		h, err := s.do(ctx, iss, http.MethodGet, next, nil, &cs)
		if err != nil {
			return nil, err
		}
		for i := range cs {
			if strings.HasPrefix(strings.TrimLeft(cs[i].Body, " \t\r\n"), mark) {
				return &cs[i], nil
			}
		}
		next, err = s.nextPage(iss, h)
		if err != nil {
			return nil, err
		}
		if seen[next] {
			return nil, fmt.Errorf("issue %s: comment pages loop", iss)
		}
	}
	return nil, nil
}

// nextPage returns the rel="next" URL of a Link header, refusing one that
// points away from the API host (the token must not follow it).
func (s *Sink) nextPage(iss issue, h http.Header) (string, error) {
	for _, v := range h.Values("Link") {
		for part := range strings.SplitSeq(v, ",") {
			target, params, ok := strings.Cut(strings.TrimSpace(part), ";")
			if !ok || !hasRelNext(params) {
				continue
			}
			target = strings.TrimSpace(target)
			if !strings.HasPrefix(target, "<") || !strings.HasSuffix(target, ">") {
				continue
			}
			u, err := s.api.Parse(target[1 : len(target)-1])
			if err != nil {
				return "", fmt.Errorf("issue %s: bad pagination link %q: %w", iss, target, err)
			}
			if u.Scheme != s.api.Scheme || u.Host != s.api.Host {
				return "", sinks.Permanent(fmt.Errorf("issue %s: pagination link to %q leaves the API host", iss, u.Host))
			}
			return u.String(), nil
		}
	}
	return "", nil
}

func hasRelNext(params string) bool {
	for p := range strings.SplitSeq(params, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		if ok && strings.EqualFold(strings.TrimSpace(k), "rel") {
			for rel := range strings.FieldsSeq(strings.Trim(strings.TrimSpace(v), `"`)) {
				if strings.EqualFold(rel, "next") {
					return true
				}
			}
		}
	}
	return false
}

func (s *Sink) create(ctx context.Context, iss issue, text string) (int64, error) {
	var c comment
	if _, err := s.do(ctx, iss, http.MethodPost, s.endpoint(iss.commentsPath()), map[string]string{"body": text}, &c); err != nil {
		return 0, err
	}
	if c.ID == 0 {
		return 0, fmt.Errorf("issue %s: created comment has no id", iss)
	}
	return c.ID, nil
}

func (s *Sink) edit(ctx context.Context, iss issue, id int64, text string) error {
	p := fmt.Sprintf("/repos/%s/%s/issues/comments/%d", url.PathEscape(iss.owner), url.PathEscape(iss.repo), id)
	_, err := s.do(ctx, iss, http.MethodPatch, s.endpoint(p), map[string]string{"body": text}, nil)
	return err
}

func (s *Sink) endpoint(p string) string { return s.api.String() + p }

// errNotFound matches a 404 answer, so an edit of a deleted comment can
// fall back to a lookup.
var errNotFound = errors.New("not found")

// notFoundError is a 404 answer; it matches errNotFound.
type notFoundError struct{ error }

func (e notFoundError) Is(target error) bool { return target == errNotFound }
func (e notFoundError) Unwrap() error        { return e.error }

// do sends one request and decodes a 2xx JSON answer into out. Errors are
// classified for the Fanout: permanent, transient, or transient with the
// server's delay.
func (s *Sink) do(ctx context.Context, iss issue, method, u string, in, out any) (http.Header, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, sinks.Permanent(fmt.Errorf("issue %s: encode request: %w", iss, err))
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, sinks.Permanent(fmt.Errorf("issue %s: %s request: %w", iss, method, err))
	}
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if tok := s.cfg.Token.Reveal(); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	what := method + " " + req.URL.Path
	resp, err := s.client.Do(req)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("issue %s: %s: %w", iss, what, cerr)
		}
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // the URL is in what already
		}
		return nil, fmt.Errorf("issue %s: %s: %w", iss, what, err)
	}
	defer resp.Body.Close()
	data, rerr := io.ReadAll(io.LimitReader(resp.Body, maxRespLen))
	if resp.StatusCode/100 == 2 {
		if rerr != nil {
			return nil, fmt.Errorf("issue %s: %s: read answer: %w", iss, what, rerr)
		}
		if out != nil {
			if err := json.Unmarshal(data, out); err != nil {
				return nil, fmt.Errorf("issue %s: %s: decode answer: %w", iss, what, err)
			}
		}
		return resp.Header, nil
	}
	return nil, s.statusError(iss, what, resp, data)
}

// statusError classifies a non-2xx answer.
func (s *Sink) statusError(iss issue, what string, resp *http.Response, data []byte) error {
	msg := apiMessage(data)
	if tok := s.cfg.Token.Reveal(); tok != "" {
		msg = strings.ReplaceAll(msg, tok, "[redacted]")
	}
	err := fmt.Errorf("issue %s: %s: %s", iss, what, resp.Status)
	if msg != "" {
		err = fmt.Errorf("issue %s: %s: %s: %q", iss, what, resp.Status, msg)
	}
	switch code := resp.StatusCode; {
	case code == http.StatusForbidden || code == http.StatusTooManyRequests:
		return sinks.RetryAfter(err, s.rateLimitDelay(resp.Header))
	case code >= 500:
		return err
	case code == http.StatusUnauthorized:
		// A refused token is a state of the tracker (a revoked or expired
		// token, an auth backend down), not of the report: transient, so
		// the comment stays pending and is sent once the token works
		// again (the Fanout's backoff; serve re-sends it at its next start).
		return err
	case code == http.StatusNotFound:
		return sinks.Permanent(notFoundError{err})
	case code == http.StatusRequestTimeout || code == http.StatusConflict || code == http.StatusTooEarly:
		return err
	case code >= 400:
		return sinks.Permanent(err)
	default:
		return fmt.Errorf("%w: unexpected status", err)
	}
}

// rateLimitDelay is how long the server asked us to wait: Retry-After
// (seconds or an HTTP date), else until X-RateLimit-Reset when no requests
// remain, else a minute.
func (s *Sink) rateLimitDelay(h http.Header) time.Duration {
	if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
		if secs, err := strconv.ParseInt(v, 10, 64); err == nil && secs >= 0 {
			return time.Duration(min(secs, 1<<31)) * time.Second
		}
		if t, err := http.ParseTime(v); err == nil {
			return max(t.Sub(s.set.Now()), 0)
		}
	}
	if strings.TrimSpace(h.Get("X-RateLimit-Remaining")) == "0" {
		if reset, err := strconv.ParseInt(strings.TrimSpace(h.Get("X-RateLimit-Reset")), 10, 64); err == nil {
			return max(time.Unix(reset, 0).Sub(s.set.Now()), time.Second)
		}
	}
	return time.Minute
}

// apiMessage extracts the "message" of a GitHub/Gitea error answer, capped.
func apiMessage(data []byte) string {
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(data, &e) != nil || e.Message == "" {
		return ""
	}
	if len(e.Message) > 200 {
		return e.Message[:200] + "…"
	}
	return e.Message
}

// issue is a parsed "OWNER/REPO#N".
type issue struct {
	owner, repo string
	number      int
}

var (
	issueRE = regexp.MustCompile(`^([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)#([0-9]+)$`)
	ownerRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)
)

// ParseIssue parses an issue reference OWNER/REPO#N (N ≥ 1, at most 10
// digits; OWNER starting with a letter or digit; each name at most 100
// characters, REPO neither "." nor ".."): the collector's issue key, the
// default_issue key, a run's issue.
func ParseIssue(s string) (owner, repo string, number int, err error) {
	m := issueRE.FindStringSubmatch(s)
	if m == nil || !ownerRE.MatchString(m[1]) || len(m[2]) > 100 || m[2] == "." || m[2] == ".." {
		return "", "", 0, fmt.Errorf("%q is not OWNER/REPO#N", s)
	}
	n, err := strconv.Atoi(m[3])
	if err != nil || n < 1 {
		return "", "", 0, fmt.Errorf("%q: issue number must be a positive integer", s)
	}
	if len(m[3]) > 10 {
		return "", "", 0, fmt.Errorf("%q: issue number has more than 10 digits", s)
	}
	return m[1], m[2], n, nil
}

func parseIssue(s string) (issue, error) {
	owner, repo, n, err := ParseIssue(s)
	if err != nil {
		return issue{}, fmt.Errorf("issue %w", err)
	}
	return issue{owner: owner, repo: repo, number: n}, nil
}

// String returns "owner/repo#n".
func (i issue) String() string { return fmt.Sprintf("%s/%s#%d", i.owner, i.repo, i.number) }

// key identifies the issue for locking (GitHub names are case-insensitive).
func (i issue) key() string { return strings.ToLower(i.String()) }

func (i issue) commentsPath() string {
	return fmt.Sprintf("/repos/%s/%s/issues/%d/comments", url.PathEscape(i.owner), url.PathEscape(i.repo), i.number)
}
