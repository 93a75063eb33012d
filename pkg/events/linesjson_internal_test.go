package events

import (
	"strings"
	"testing"
	"time"
)

// FuzzLogLinesDataMatchesMarshal holds appendLogLinesData to marshalData:
// the same bytes for any stream, texts (control bytes, quotes, invalid
// UTF-8, U+2028) and times (zero, far years, other zones), or a fall back
// to marshalData.
func FuzzLogLinesDataMatchesMarshal(f *testing.F) {
	f.Add("stderr", uint64(1), "llama_model_load: \x1b[0m<unk> -> \"x\"\n\\\t\b\f\x00\x7f\u2028\u2029\xff\xfe end", int64(1764633600123456789), uint8(0))
	f.Add("log", uint64(0), "", int64(0), uint8(1))
	f.Add("stdout", ^uint64(0), "a\x1fb\x1ec", int64(-62135596800000000000/1000), uint8(2))
	f.Fuzz(func(t *testing.T, stream string, first uint64, texts string, nanos int64, mode uint8) {
		d := LogLinesData{Stream: stream, FirstSeq: first}
		if mode&8 == 0 {
			for i, txt := range strings.Split(texts, "\x1d") {
				tm := time.Unix(0, nanos+int64(i)*1e6)
				switch mode % 4 {
				case 0:
					tm = tm.UTC()
				case 1:
					tm = time.Time{}
				case 2:
					tm = tm.UTC().AddDate(int(nanos%20000), 0, 0) // far years
				case 3:
					tm = tm.In(time.FixedZone("X", 3600))
				}
				d.Lines = append(d.Lines, LineData{T: tm, Text: txt})
			}
		}
		want, werr := marshalData(d)
		got, ok := appendLogLinesData(nil, d)
		if !ok {
			return // marshalData's path, which is want
		}
		if werr != nil {
			t.Fatalf("marshalData fails (%v) where appendLogLinesData wrote %q", werr, got)
		}
		if string(got) != string(want) {
			t.Fatalf("appendLogLinesData:\n%s\nmarshalData:\n%s", got, want)
		}
	})
}
