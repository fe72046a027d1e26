package admission

import "testing"

// BenchmarkLeaseRecordCodec decodes and re-encodes a lease record holding one lease, as
// a release does.
func BenchmarkLeaseRecordCodec(b *testing.B) {
	nowMs := t0.UnixMilli()
	r := leaseRecord{nextID: seedID(nowMs) + 7, leases: []lease{{id: seedID(nowMs) + 6, deadlineMs: nowMs + 120000, model: hashModel("gpt-4o")}}}
	enc := r.encode(nil)
	var d leaseRecord
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		if err := d.decode(enc); err != nil {
			b.Fatal(err)
		}
		buf = d.encode(buf)
	}
	if string(buf) != string(enc) {
		b.Fatal("round trip changed the record")
	}
}
