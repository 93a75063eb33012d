package collector

import (
	"bytes"
	"compress/gzip"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/internal/cli"
	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/pkg/events"
)

// checkRun is the recorded 4B reference run (testdata/runs/4b/events.jsonl,
// gzipped; TestCheckRunIsTheReferenceRun keeps it so) that Check publishes
// under a new identity.
//
//go:embed checkrun/4b.jsonl.gz
var checkRun []byte

// CheckOptions are what `collector check` is given besides its config.
type CheckOptions struct {
	// Aggregators are the aggregators' HTTP base URLs (http://agg-1:8080).
	Aggregators []string
	// Timeout bounds each wait: an aggregator ready, the partitions
	// shared, the run on every page.
	Timeout time.Duration
	// Poll is how often a wait looks again (default 500ms).
	Poll time.Duration
	// Now is the clock of the run's new identity (default time.Now).
	Now func() time.Time
}

// Check is `collector check`, the "is it working?" of a new fleet, run on
// a GPU host with its collector's settings: every aggregator answers
// /readyz; the partitions are all owned and shared by the aggregators
// given (each owns some); the recorded 4B run, under a new id of this
// host (lane cfg.Lane, else "check"), is published through the broker as
// `collector replay` would; and it shows on every aggregator's page. Each
// step is a line on w; the first that fails ends it with an error naming
// it. http.token is sent to the aggregators (their http.token, needed off
// loopback).
func Check(ctx context.Context, cfg config.Collector, opt CheckOptions, w io.Writer, log zerolog.Logger) error {
	if len(opt.Aggregators) == 0 {
		return cli.Usage(errors.New("check needs the aggregators' HTTP addresses: collector check http://agg-1:8080 http://agg-2:8080"))
	}
	if cfg.NATS.URL == "" {
		return cli.Usage(errors.New("check publishes a run through the broker: set --nats-url (GTTSPLIT_NATS_URL)"))
	}
	if opt.Poll <= 0 {
		opt.Poll = 500 * time.Millisecond
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	c := checker{opt: opt, token: cfg.HTTP.Token.Reveal(), client: &http.Client{Timeout: 10 * time.Second}, w: w}
	step := 0
	say := func(format string, args ...any) {
		step++
		fmt.Fprintf(w, "%d. %s\n", step, fmt.Sprintf(format, args...))
	}
	bases := make([]string, len(opt.Aggregators))
	for i, a := range opt.Aggregators {
		bases[i] = strings.TrimRight(a, "/")
		if err := c.wait(ctx, "ready", func(ctx context.Context) (bool, string, error) { return c.ready(ctx, bases[i]) }); err != nil {
			return fmt.Errorf("%s/readyz: %w", bases[i], err)
		}
		say("%s/readyz: ready", bases[i])
	}
	var shared string
	if err := c.wait(ctx, "shared", func(ctx context.Context) (ok bool, why string, err error) {
		ok, shared, err = c.partitions(ctx, bases)
		return ok, shared, err
	}); err != nil {
		return fmt.Errorf("partitions: %w", err)
	}
	say("partitions: %s", shared)

	host := cfg.Host
	if host == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("host name: %w", err)
		}
		host = h
	}
	lane := cfg.Lane
	if lane == "" || lane == config.DefaultCollector().Lane {
		lane = "check" // a lane of its own, unless one was chosen
	}
	now := opt.Now()
	o := events.Origin{RunID: "check-" + tokenSafe(host) + "-" + now.UTC().Format("20060102T150405"), Host: host, Lane: lane}
	stream, err := reidentify(checkRun, o, now)
	if err != nil {
		return fmt.Errorf("the recorded run: %w", err)
	}
	dir, err := os.MkdirTemp("", "gttsplit-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "events.jsonl")
	if err := os.WriteFile(file, stream, 0o600); err != nil {
		return err
	}
	rc := cfg
	rc.Replay.Pace = "instant"
	st, err := Replay(ctx, rc, []string{file}, IO{}, log)
	if err != nil {
		return fmt.Errorf("publish run %s: %w", o.RunID, err)
	}
	say("published the recorded 4B run as %s (host %s, lane %s): %d events", o.RunID, host, lane, st.Delivered)
	for _, b := range bases {
		var seen string
		if err := c.wait(ctx, "on the page", func(ctx context.Context) (ok bool, why string, err error) {
			ok, seen, err = c.page(ctx, b, o.RunID)
			return ok, seen, err
		}); err != nil {
			return fmt.Errorf("%s/run/%s: %w", b, o.RunID, err)
		}
		say("%s/run/%s: %s", b, o.RunID, seen)
	}
	fmt.Fprintf(w, "the fleet works: %d aggregators ready, the partitions shared, a run from %s on every page\n", len(bases), host)
	return nil
}

// checker makes the check's HTTP requests.
type checker struct {
	opt    CheckOptions
	token  string
	client *http.Client
	w      io.Writer
}

// wait polls cond until it holds, it fails, ctx ends or the timeout
// passes; the error then says what it last saw. An attempt the timeout
// cut short saw nothing: the error names the one before it (on a busy
// machine the last attempt is often still under way when time is up, and
// "context deadline exceeded" would hide a refused connection).
func (c checker) wait(ctx context.Context, what string, cond func(context.Context) (bool, string, error)) error {
	ctx, cancel := context.WithTimeout(ctx, c.opt.Timeout)
	defer cancel()
	last := ""
	for {
		ok, why, err := cond(ctx)
		if err == nil && ok {
			return nil
		}
		if err != nil {
			why = err.Error()
		}
		if err == nil || ctx.Err() == nil || last == "" {
			last = why
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not %s after %s: %s", what, c.opt.Timeout, last)
		case <-time.After(c.opt.Poll):
		}
	}
}

// get fetches base+path; a status other than 200 is said with the body's
// first line.
func (c checker) get(ctx context.Context, url string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return resp.StatusCode, body, err
}

func firstLine(b []byte) string {
	l, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return l
}

func (c checker) ready(ctx context.Context, base string) (bool, string, error) {
	code, body, err := c.get(ctx, base+"/readyz")
	if err != nil {
		return false, "", err
	}
	return code == http.StatusOK, fmt.Sprintf("%d %s", code, firstLine(body)), nil
}

// partitions says whether every partition has an owner and every
// aggregator of bases owns some, as each of them sees it.
func (c checker) partitions(ctx context.Context, bases []string) (bool, string, error) {
	type view struct {
		Member     string   `json:"member"`
		Members    []string `json:"members"`
		Partitions []struct {
			Partition int    `json:"partition"`
			Owner     string `json:"owner"`
		} `json:"partitions"`
	}
	views := make([]view, len(bases))
	for i, b := range bases {
		code, body, err := c.get(ctx, b+"/partitions")
		if err != nil {
			return false, "", err
		}
		if code != http.StatusOK {
			if code == http.StatusUnauthorized || code == http.StatusForbidden {
				return false, "", fmt.Errorf("%s/partitions: %d %s: give the aggregators' http.token in GTTSPLIT_HTTP_TOKEN", b, code, firstLine(body))
			}
			return false, fmt.Sprintf("%s/partitions: %d %s", b, code, firstLine(body)), nil
		}
		if err := json.Unmarshal(body, &views[i]); err != nil {
			return false, "", fmt.Errorf("%s/partitions: %w", b, err)
		}
	}
	owned := map[string]int{}
	unowned := 0
	for _, p := range views[0].Partitions {
		if p.Owner == "" {
			unowned++
		}
		owned[p.Owner]++
	}
	var parts []string
	for i, v := range views {
		n := owned[v.Member]
		parts = append(parts, fmt.Sprintf("%s %d", bases[i], n))
		if n == 0 {
			return false, fmt.Sprintf("%s (member %s) owns no partition yet; %d members: %s", bases[i], v.Member, len(views[0].Members), strings.Join(parts, ", ")), nil
		}
	}
	if unowned > 0 {
		return false, fmt.Sprintf("%d of %d partitions have no owner", unowned, len(views[0].Partitions)), nil
	}
	return true, fmt.Sprintf("%d owned, shared by %d members (%s)", len(views[0].Partitions), len(views[0].Members), strings.Join(parts, ", ")), nil
}

// page says whether the run shows on base's page, and what its split is.
func (c checker) page(ctx context.Context, base, id string) (bool, string, error) {
	code, body, err := c.get(ctx, base+"/run/"+id)
	if err != nil {
		return false, "", err
	}
	if code != http.StatusOK || !bytes.Contains(body, []byte(id)) {
		return false, fmt.Sprintf("%d %s", code, firstLine(body)), nil
	}
	code, body, err = c.get(ctx, base+"/runs/"+id)
	if err != nil || code != http.StatusOK {
		return false, fmt.Sprintf("/runs/%s: %d %s", id, code, firstLine(body)), err
	}
	var r struct {
		Peak *float64 `json:"peak_gtt_mib"`
		Run  struct {
			Complete bool `json:"complete"`
		} `json:"run"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return false, "", err
	}
	if !r.Run.Complete || r.Peak == nil {
		return false, "on the page, not closed yet", nil
	}
	return true, fmt.Sprintf("on the page, closed complete, peak %.1f MiB", *r.Peak), nil
}

// reidentify rewrites a recorded stream (gzipped JSON Lines) as the run o,
// its times moved so that it starts at start.
func reidentify(gz []byte, o events.Origin, start time.Time) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, err
	}
	r := events.NewReader(zr)
	var out bytes.Buffer
	jw := events.NewWriter(&out)
	var shift time.Duration
	for r.Next() {
		d, err := events.Decode(r.Event())
		if err != nil {
			return nil, err
		}
		if d.Type == events.TypeRunStarted {
			shift = start.Sub(d.Started.Info.Started)
		}
		ev, err := moved(d, o, shift)
		if err != nil {
			return nil, err
		}
		if err := jw.Write(ev); err != nil {
			return nil, err
		}
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// moved is the event d of run o, its times shifted.
func moved(d events.Decoded, o events.Origin, shift time.Duration) (event.Event, error) {
	switch d.Type {
	case events.TypeRunStarted:
		info := d.Started.Info
		info.ID, info.Host, info.Lane = o.RunID, o.Host, o.Lane
		// Not the reference run's issue: a fleet that posts comments
		// would post the check's there.
		info.Issue, info.ControlOf = "", ""
		info.Started = info.Started.Add(shift)
		return events.NewRunStarted(info, d.Started.Detail)
	case events.TypeLogLines:
		lines := append(d.Lines[:0:0], d.Lines...)
		for i := range lines {
			lines[i].Time = lines[i].Time.Add(shift)
		}
		return events.NewLogLines(o, lines)
	case events.TypeFDInfoSample:
		s := *d.Sample
		s.Time = s.Time.Add(shift)
		return events.NewFDInfoSample(o, s)
	case events.TypeRunFinished:
		f := d.Finished.Info
		f.Finished = f.Finished.Add(shift)
		return events.NewRunFinished(o, f, d.Finished.Detail)
	}
	return event.Event{}, fmt.Errorf("%s: a recorded run holds no %s event", d.ID, d.Type)
}
