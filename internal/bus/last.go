package bus

import (
	"context"
	"encoding/json"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Last is a stream's last message on a subject.
type Last struct {
	Seq    uint64
	Header nats.Header // nil when it has none
	Data   []byte
}

// GetLast reads the last message on subject from the leader of stream
// ($JS.API.STREAM.MSG.GET, last_by_subj), in one request bounded by ctx.
// A direct get may be answered by any replica, one behind the leader
// among them; this one is not. jetstream.ErrMsgNotFound when the stream
// holds no message on subject.
func GetLast(ctx context.Context, nc *nats.Conn, stream, subject string) (Last, error) {
	req, _ := json.Marshal(struct {
		LastFor string `json:"last_by_subj"`
	}{subject})
	resp, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, req)
	if err != nil {
		return Last{}, err
	}
	var r struct {
		Message *struct {
			Seq    uint64 `json:"seq"`
			Header []byte `json:"hdrs"`
			Data   []byte `json:"data"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return Last{}, err
	}
	if r.Error != nil {
		if r.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return Last{}, jetstream.ErrMsgNotFound
		}
		return Last{}, r.Error
	}
	if r.Message == nil {
		return Last{}, jetstream.ErrMsgNotFound
	}
	l := Last{Seq: r.Message.Seq, Data: r.Message.Data}
	if len(r.Message.Header) > 0 {
		if l.Header, err = nats.DecodeHeadersMsg(r.Message.Header); err != nil {
			return Last{}, err
		}
	}
	return l, nil
}

// Deleted says whether the message marks its key of a key-value bucket
// deleted: a delete or a purge, or the marker the server leaves for a
// key whose time to live ran out (Marker says which).
func (l Last) Deleted() bool {
	return l.Header.Get("KV-Operation") != "" || l.Marker() != ""
}

// Marker is the reason of a marker the server wrote ("MaxAge": a time to
// live ran out; "Remove", "Purge"), "" for any other message.
func (l Last) Marker() string { return l.Header.Get(jetstream.MarkerReasonHeader) }
