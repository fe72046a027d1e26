package router

import "testing"

func TestRequestBody(t *testing.T) {
	var b RequestBody
	p := make([]byte, 3)
	if n, st := b.Read(p); n != 0 || st != ReadWait {
		t.Fatalf("empty: %d, %v; want 0, wait", n, st)
	}
	b.Push([]byte("hello"))
	b.Push(nil) // nothing to queue
	b.Push([]byte("!"))
	if b.Queued() != 6 {
		t.Fatalf("queued %d, want 6", b.Queued())
	}
	var got []byte
	for {
		n, st := b.Read(p)
		if st != ReadData {
			if st != ReadWait {
				t.Fatalf("state %v before the end, want wait", st)
			}
			break
		}
		got = append(got, p[:n]...)
	}
	if string(got) != "hello!" || b.Queued() != 0 {
		t.Fatalf("read %q (queued %d), want hello! in order", got, b.Queued())
	}
	b.End([][2]string{{"x", "1"}})
	if _, st := b.Read(p); st != ReadEOF || b.Trailers()[0][1] != "1" {
		t.Fatalf("after the end: %v, trailers %q", st, b.Trailers())
	}
}

func TestAbandonedRequestBodyIsGoneFirst(t *testing.T) {
	var b RequestBody
	b.Push([]byte("unread"))
	b.End(nil)
	b.Abandon()
	b.Push([]byte("late"))
	if n, st := b.Read(make([]byte, 8)); n != 0 || st != ReadGone || b.Queued() != 0 || !b.Gone() {
		t.Fatalf("abandoned: %d, %v, queued %d; want 0, gone, 0", n, st, b.Queued())
	}
}
