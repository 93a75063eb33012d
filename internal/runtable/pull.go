package runtable

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A partition's pulls are its own requests, not nats.go's Fetch: Fetch
// gives a pull up once nothing came on it for its expiry and a second,
// whatever its context says, and drops what the broker sent on it later (a
// loaded machine reads its socket seconds late; a loaded broker takes a
// pull late and serves it up to its expiry after that): those messages
// were delivered again only an ack wait later (~290 of a 1,000-run
// backlog's 27,000 events at load 37-48, in bursts of up to a pull's 64).
// Here each pull listens on a reply subject of its own until the broker
// ended it (it brought what it asked for, or the broker's status for it
// came), not until the table stopped waiting for it: a message that comes
// on a pull the table gave up is handled as any other. Every pull's
// subscription feeds one channel, in the order the connection read them.
// A consumer that stopped (a stop, a hand-over, a lease lost) keeps
// listening to its pulls until the broker ended them or, at a stop, until
// the broker says nothing it delivered is still on its way, and
// hands back what they bring as it comes; only what comes after that
// (past the pulls' expiry, the stop's deadline, Close) is dropped, and a
// pull given up that falls out of the last pullsKept is no longer
// listened to.

// pullRequest is a pull request to a consumer, as the JetStream API takes
// it.
type pullRequest struct {
	Batch     int           `json:"batch"`
	Expires   time.Duration `json:"expires,omitempty"`
	Heartbeat time.Duration `json:"idle_heartbeat,omitempty"`
	Group     string        `json:"group,omitempty"`
	PinID     string        `json:"id,omitempty"`
}

// pullsKept bounds the pulls listened to: the current one and those the
// table gave up that the broker has not ended yet (in practice one or two).
const pullsKept = 16

// A pull of longHeartbeatPull or longer asks the broker for a heartbeat
// every pullHeartbeat while it has nothing to send, and is given up when
// neither a message nor a heartbeat came on it for twice that (its
// consumer's leader died with it, say), as nats.go's Fetch did: a pull
// given up is still listened to.
const (
	longHeartbeatPull = 10 * time.Second
	pullHeartbeat     = 5 * time.Second
)

// heartbeatOf is the heartbeat a pull of expiry asks for (0: none).
func heartbeatOf(expiry time.Duration) time.Duration {
	if expiry >= longHeartbeatPull {
		return pullHeartbeat
	}
	return 0
}

// pulled is a partition consumer's pulls: the messages they brought not
// handed to the handler yet, in the order they came, and the state of the
// current pull. It is fed by the pulls' subscriptions (part.listen), drained
// by the consumer's loop (pop).
type pulled struct {
	mu    sync.Mutex
	q     []pulledMsg
	ready chan struct{} // a message came, or the pull ended
	// The current pull: its number, how many messages it asked for and
	// got, whether it ended (all came, the broker ended it, or the table
	// stopped waiting for it) and how the broker ended it.
	id        uint64
	want, got int
	expiry    time.Duration
	hb        time.Duration // its heartbeat (0: none)
	heard     time.Time     // when a message or a heartbeat last came on it
	ended     bool
	err       error
	// pulls are the pulls listened to, by number.
	pulls map[uint64]*pullSub
	// pin is the consumer's pin in its priority group, as the broker
	// last said it.
	pin string
	// stopped is set once the consumer stopped: what comes is handed
	// back at once.
	stopped bool
}

// pullSub is a pull listened to.
type pullSub struct {
	sub       *nats.Subscription
	sent      time.Time
	expiry    time.Duration
	want, got int
	// pinned: it was sent with the consumer's pin (once the partition is
	// unpinned the broker ends it, with a 423, rather than deliver on it).
	pinned bool
}

type pulledMsg struct {
	jm jetstream.Msg
	fl *flight
}

func newPulled() *pulled {
	return &pulled{ready: make(chan struct{}, 1), pulls: map[uint64]*pullSub{}, ended: true}
}

func (p *pulled) signal() {
	select {
	case p.ready <- struct{}{}:
	default:
	}
}

// next is the number of the next pull and the pin to send with it.
func (p *pulled) next() (uint64, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.id + 1, p.pin
}

// start begins pull id (from next), asking for want messages for
// expiry, sent at now with the pin pin, listened to on sub. It stops
// listening to the pull pullsKept pulls before, if the broker has not
// ended it.
func (p *pulled) start(id uint64, sub *nats.Subscription, want int, expiry time.Duration, pin string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.id = id
	p.want, p.got, p.expiry, p.ended, p.err = want, 0, expiry, false, nil
	p.hb, p.heard = heartbeatOf(expiry), now
	p.pulls[id] = &pullSub{sub: sub, sent: now, expiry: expiry, want: want, pinned: pin != ""}
	if id > pullsKept {
		p.forget(id - pullsKept)
	}
}

// forget stops listening to pull id (p.mu held).
func (p *pulled) forget(id uint64) {
	if ps, ok := p.pulls[id]; ok {
		if ps.sub != nil {
			_ = ps.sub.Unsubscribe()
		}
		delete(p.pulls, id)
		if p.stopped {
			p.signal() // (drain)
		}
	}
}

// message takes a message that came on pull id at now: add puts it in the
// ledger, its ack wait counted from at. A message of the current pull
// counts from when it came, unless it came past the pull's expiry; one of
// a pull the table stopped waiting for counts from when its pull was sent
// (the broker may have sent it as early as that). It reports whether the
// message is late (its pull no longer waited for), and, when the consumer
// stopped, the message's flight to hand back (the message is not
// queued).
func (p *pulled) message(id uint64, jm jetstream.Msg, pin string, now time.Time, add func(at time.Time) *flight) (late bool, back *flight) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pin != "" {
		p.pin = pin
	}
	current := id == p.id && !p.ended
	at := now
	if ps, ok := p.pulls[id]; ok {
		if !current || now.Sub(ps.sent) > p.expiry {
			at = ps.sent
		}
		if ps.got++; ps.got >= ps.want {
			p.forget(id) // all it asked for came
		}
	}
	if current {
		p.heard = now
		if p.got++; p.got >= p.want {
			p.ended = true
		}
	}
	fl := add(at)
	if p.stopped {
		return !current, fl
	}
	p.q = append(p.q, pulledMsg{jm: jm, fl: fl})
	p.signal()
	return !current, nil
}

// none says nothing came yet on the current pull, still waited for.
func (p *pulled) none() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.ended && p.got == 0
}

// beat takes a heartbeat that came on pull id at now.
func (p *pulled) beat(id uint64, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if id == p.id {
		p.heard = now
	}
}

// status takes a status the broker sent on pull id: the end of that pull
// (err nil when it expired).
func (p *pulled) status(id uint64, code string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if code == pinMismatch {
		p.pin = ""
	}
	p.forget(id)
	if id != p.id || p.ended {
		return
	}
	p.ended, p.err = true, err
	p.signal()
}

// pop returns the next message pulled, waiting for it; nil once the
// current pull ended and every message was taken. When ctx ends first the
// table stops waiting for the pull (what it brings later is still taken,
// by a later pop): its error is ctx's; when its heartbeats stopped,
// jetstream.ErrNoHeartbeat.
func (p *pulled) pop(ctx context.Context) (jetstream.Msg, *flight) {
	for {
		p.mu.Lock()
		if len(p.q) > 0 {
			pm := p.q[0]
			p.q[0] = pulledMsg{}
			p.q = p.q[1:]
			p.mu.Unlock()
			return pm.jm, pm.fl
		}
		if p.ended {
			p.mu.Unlock()
			return nil, nil
		}
		var silent <-chan time.Time
		var t *time.Timer
		if p.hb > 0 {
			t = time.NewTimer(time.Until(p.heard.Add(2 * p.hb)))
			silent = t.C
		}
		p.mu.Unlock()
		p.wait(ctx, silent)
		if t != nil {
			t.Stop()
		}
	}
}

// wait waits for a message or the end of the current pull: its
// heartbeats stopped (silent fired) or ctx ended.
func (p *pulled) wait(ctx context.Context, silent <-chan time.Time) {
	select {
	case <-p.ready:
	case <-silent:
		p.mu.Lock()
		if !p.ended && time.Since(p.heard) >= 2*p.hb {
			p.ended, p.err = true, jetstream.ErrNoHeartbeat
		}
		p.mu.Unlock()
	case <-ctx.Done():
		p.mu.Lock()
		if !p.ended {
			p.ended, p.err = true, ctx.Err()
		}
		p.mu.Unlock()
	}
}

// end is how the current pull ended (nil: it brought what it asked for,
// or expired).
func (p *pulled) end() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// stop says the consumer stopped: it returns what was pulled and not
// handled (to hand back). What still comes is handed back as it comes;
// its pulls are still listened to (drain), so that what the broker sends
// on them after the stop goes back at once to the stream, not an ack wait
// later.
func (p *pulled) stop() []pulledMsg {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped, p.ended = true, true
	q := p.q
	p.q = nil
	return q
}

// drain listens to a stopped consumer's pulls until the broker ended each
// (it brought what it asked for, or its status came: an expiry, or the
// 423 the broker sends a pull whose pin its next owner's unpin dropped),
// at most grace past its expiry, or until quit is closed; then it stops
// listening to those left. What comes meanwhile is handed back as it
// comes (came).
func (p *pulled) drain(quit <-chan struct{}, grace time.Duration) {
	for {
		p.mu.Lock()
		var until time.Time
		for _, ps := range p.pulls {
			if u := ps.sent.Add(ps.expiry + grace); u.After(until) {
				until = u
			}
		}
		p.mu.Unlock()
		wait := time.Until(until)
		if wait <= 0 {
			break
		}
		t := time.NewTimer(wait)
		stop := false
		select {
		case <-p.ready:
		case <-t.C:
		case <-quit:
			stop = true
		}
		t.Stop()
		if stop {
			break
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for id := range p.pulls {
		p.forget(id)
	}
}

// cutSettled stops listening to a stopped consumer's pulls once the
// broker said that nothing it delivered to the consumer is on its way
// (awaitPulls) and its partition was unpinned: a pull sent with the
// pin is then ended (423) rather than served; one sent without a pin
// could still be pinned and served, so it is kept while events wait
// (waiting: the consumer's pending count was not 0). It reports whether
// no pull is listened to any more (the drain ends).
func (p *pulled) cutSettled(waiting bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, ps := range p.pulls {
		if ps.pinned || !waiting {
			p.forget(id)
		}
	}
	p.signal()
	return len(p.pulls) == 0
}

// The JetStream status codes a pull's end comes with.
const (
	statusHeartbeat = "100"
	noMessages      = "404"
	pullExpired     = "408"
	conflict        = "409"
	pinMismatch     = "423"
	noResponders    = "503"
)

// pullStatus is the status a pull's message carries ("" for an event)
// and what it means: nil for an expiry.
func pullStatus(m *nats.Msg) (string, error) {
	if len(m.Data) > 0 || len(m.Header) == 0 {
		return "", nil
	}
	code := m.Header.Get("Status")
	descr := m.Header.Get("Description")
	switch code {
	case "", statusHeartbeat, noMessages, pullExpired:
		return code, nil
	case pinMismatch:
		return code, jetstream.ErrPinIDMismatch
	case noResponders:
		return code, nats.ErrNoResponders
	case conflict:
		if strings.Contains(strings.ToLower(descr), "leadership change") {
			return code, jetstream.ErrConsumerLeadershipChanged
		}
	}
	return code, fmt.Errorf("pull ended: %s %s", code, descr)
}

// pullNumber is the pull a message came on: the last token of its
// subscription's subject.
func pullNumber(m *nats.Msg) uint64 {
	if m.Sub == nil {
		return 0
	}
	s := m.Sub.Subject
	n, _ := strconv.ParseUint(s[strings.LastIndexByte(s, '.')+1:], 10, 64)
	return n
}

// inboxLen bounds the messages the pulls listened to can bring at once
// (each at most its batch, its heartbeats, an idle pull's three, and its
// status): the channel they come on never drops one.
const inboxLen = pullsKept * (pullBatch + 4)

// listen takes the messages the pulls of c bring, in the order they came,
// until quit is closed; then it takes what came meanwhile and returns.
func (pt *part) listen(c *partConsumer, in <-chan *nats.Msg, quit <-chan struct{}) {
	for {
		select {
		case m := <-in:
			pt.came(c, m)
			continue
		case <-quit:
		}
		for {
			select {
			case m := <-in:
				pt.came(c, m)
			default:
				return
			}
		}
	}
}

// came takes one message that came on a pull of c.
func (pt *part) came(c *partConsumer, m *nats.Msg) {
	id := pullNumber(m)
	if code, err := pullStatus(m); code != "" {
		if code == statusHeartbeat {
			c.pulled.beat(id, time.Now())
		} else {
			c.pulled.status(id, code, err)
		}
		return
	}
	jm := &coreMsg{m: m, nc: pt.t.js.Conn()}
	var seq, delivered uint64
	if md, err := m.Metadata(); err == nil {
		seq, delivered = md.Sequence.Stream, md.NumDelivered
		c.seq.Store(seq)
		c.behind.Store(md.NumPending)
		c.seqAt.Store(time.Now().UnixNano())
		pt.t.evBytes.Add(int64(len(m.Data) + len(m.Subject) + 64))
		pt.t.evCount.Add(1)
		c.sawDelivery(md.Sequence.Consumer)
	}
	late, back := c.pulled.message(id, jm, m.Header.Get(pinHeader), time.Now(), func(at time.Time) *flight {
		return pt.fl.addSeq(jm, m.Reply, seq, delivered, at)
	})
	if late && back == nil {
		pt.t.m.pulledLate.Inc()
		pt.t.log.Debug().Int("partition", pt.p).Uint64("seq", seq).Uint64("pull", id).Msg("event came on a pull no longer waited for; handled")
	}
	if back != nil {
		_ = jm.Nak()
		pt.handBack(back, pt.backWhy(c))
	}
}

const pinHeader = "Nats-Pin-Id"

// pull sends c's next pull: batch messages at most, expiring after
// expiry, its messages to in.
func (c *partConsumer) pull(nc *nats.Conn, in chan *nats.Msg, batch int, expiry time.Duration) error {
	id, pin := c.pulled.next()
	reply := c.inbox + "." + strconv.FormatUint(id, 10)
	sub, err := nc.ChanSubscribe(reply, in)
	if err != nil {
		return err
	}
	req, err := json.Marshal(pullRequest{Batch: batch, Expires: expiry, Heartbeat: heartbeatOf(expiry), Group: ownerGroup, PinID: pin})
	if err != nil {
		_ = sub.Unsubscribe()
		return err
	}
	c.pulled.start(id, sub, batch, expiry, pin, time.Now())
	if err := nc.PublishRequest(c.next, reply, req); err != nil {
		c.pulled.status(id, "", err)
		return err
	}
	return nil
}

// coreMsg is a JetStream message received on a core subscription: its
// acknowledgements are published on its reply subject, as nats.go's
// JetStream messages do (once acknowledged, terminated or negatively
// acknowledged, it is not acknowledged again).
type coreMsg struct {
	m    *nats.Msg
	nc   *nats.Conn
	ackd atomic.Bool
}

var _ jetstream.Msg = (*coreMsg)(nil)

func (c *coreMsg) Metadata() (*jetstream.MsgMetadata, error) {
	md, err := c.m.Metadata()
	if err != nil {
		return nil, err
	}
	return &jetstream.MsgMetadata{
		Sequence:     jetstream.SequencePair{Consumer: md.Sequence.Consumer, Stream: md.Sequence.Stream},
		NumDelivered: md.NumDelivered,
		NumPending:   md.NumPending,
		Timestamp:    md.Timestamp,
		Stream:       md.Stream,
		Consumer:     md.Consumer,
		Domain:       md.Domain,
	}, nil
}

func (c *coreMsg) Data() []byte         { return c.m.Data }
func (c *coreMsg) Headers() nats.Header { return c.m.Header }
func (c *coreMsg) Subject() string      { return c.m.Subject }
func (c *coreMsg) Reply() string        { return c.m.Reply }

// settle sends body; final: the message is settled by it.
func (c *coreMsg) settle(body []byte, final bool) error {
	if c.m.Reply == "" {
		return jetstream.ErrMsgNoReply
	}
	if c.ackd.Load() {
		return jetstream.ErrMsgAlreadyAckd
	}
	if err := c.nc.Publish(c.m.Reply, body); err != nil {
		return err
	}
	if final {
		c.ackd.Store(true)
	}
	return nil
}

func (c *coreMsg) Ack() error        { return c.settle([]byte("+ACK"), true) }
func (c *coreMsg) Nak() error        { return c.settle([]byte("-NAK"), true) }
func (c *coreMsg) InProgress() error { return c.settle([]byte("+WPI"), false) }
func (c *coreMsg) Term() error       { return c.settle([]byte("+TERM"), true) }

func (c *coreMsg) NakWithDelay(d time.Duration) error {
	return c.settle(fmt.Appendf(nil, "-NAK {\"delay\": %d}", d.Nanoseconds()), true)
}

func (c *coreMsg) TermWithReason(reason string) error {
	return c.settle([]byte("+TERM "+reason), true)
}

// DoubleAck acknowledges the message and waits for the broker's answer.
func (c *coreMsg) DoubleAck(ctx context.Context) error {
	if c.m.Reply == "" {
		return jetstream.ErrMsgNoReply
	}
	if c.ackd.Load() {
		return jetstream.ErrMsgAlreadyAckd
	}
	if _, err := c.nc.RequestWithContext(ctx, c.m.Reply, []byte("+ACK")); err != nil {
		return err
	}
	c.ackd.Store(true)
	return nil
}
