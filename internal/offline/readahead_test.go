package offline

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

func TestReadAheadSameBytes(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef\n"), 3*raBlock/17+5)
	got, err := io.ReadAll(iotest.OneByteReader(newReadAhead(bytes.NewReader(data))))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, err %v; want %d", len(got), err, len(data))
	}
	if err := iotest.TestReader(newReadAhead(bytes.NewReader(data[:70000])), data[:70000]); err != nil {
		t.Fatal(err)
	}
}

func TestReadAheadErrorAndEarlyClose(t *testing.T) {
	boom := errors.New("boom")
	ra := newReadAhead(io.MultiReader(bytes.NewReader(make([]byte, raBlock+10)), iotest.ErrReader(boom)))
	if _, err := io.ReadAll(ra); !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
	ra.Close()
	// Closed before reading anything: the goroutine stops.
	ra = newReadAhead(bytes.NewReader(make([]byte, 10*raBlock)))
	ra.Close()
}
