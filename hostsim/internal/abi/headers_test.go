package abi

import (
	"reflect"
	"testing"
)

func TestHeaderLists(t *testing.T) {
	if LowerKeys(nil) != nil || ClonePairs(nil) != nil {
		t.Fatal("nil header lists must stay nil (a missing map is not an empty one)")
	}
	in := [][2]string{{"X-A", "1"}, {"b", "2"}}
	low := LowerKeys(in)
	if want := [][2]string{{"x-a", "1"}, {"b", "2"}}; !reflect.DeepEqual(low, want) || in[0][0] != "X-A" {
		t.Fatalf("LowerKeys = %q (input now %q), want %q and the input kept", low, in, want)
	}
	if got := AppendLower(low[:1], in[:1]); !reflect.DeepEqual(got, [][2]string{{"x-a", "1"}, {"x-a", "1"}}) {
		t.Fatalf("AppendLower = %q", got)
	}
	c := ClonePairs(in)
	c[0][1] = "changed"
	if in[0][1] != "1" {
		t.Fatal("ClonePairs aliases its input")
	}
	if v, ok := HeaderValue(in, "b"); !ok || v != "2" {
		t.Fatalf("HeaderValue(b) = %q, %v", v, ok)
	}
	if _, ok := HeaderValue(in, "x-a"); ok {
		t.Fatal("HeaderValue matches keys case-insensitively; the model's keys are lower case already")
	}
	h := SetHeader([][2]string{{"a", "1"}}, "a", "2")
	h = SetHeader(h, "c", "3")
	if want := [][2]string{{"a", "2"}, {"c", "3"}}; !reflect.DeepEqual(h, want) {
		t.Fatalf("SetHeader = %q, want %q", h, want)
	}
	multi := [][2]string{{"a", "1"}, {"m", "x"}, {"b", "2"}, {"m", "y"}}
	if got, want := RemoveHeader(multi, "m"), [][2]string{{"a", "1"}, {"b", "2"}}; !reflect.DeepEqual(got, want) || len(multi) != 4 {
		t.Fatalf("RemoveHeader = %q (input %q), want %q, every value gone and the input kept", got, multi, want)
	}
	if got := RemoveHeader(multi, "z"); &got[0] != &multi[0] {
		t.Fatal("RemoveHeader of a missing key copied the list")
	}
}
