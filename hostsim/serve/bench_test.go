package serve

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkChatCompletion measures one chat completion through serve end to end on
// loopback: HTTP front end, the Spillway filter in a worker VM, the fake upstream and back.
func BenchmarkChatCompletion(b *testing.B) {
	d := startDemo(b, nil)
	url := d.URL() + "/v1/chat/completions"
	client := &http.Client{}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := client.Post(url, "application/json", strings.NewReader(chatBody))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

// BenchmarkDo measures Server.Do alone (no front-end HTTP): the filter, hostsim's
// scheduling and the upstream call to the fake.
func BenchmarkDo(b *testing.B) {
	d := startDemo(b, nil)
	body := []byte(chatBody)
	b.ReportAllocs()
	for b.Loop() {
		req, _ := http.NewRequest("POST", "http://localhost/v1/chat/completions", nil)
		req.Header.Set("content-type", "application/json")
		if res := d.Server.Do(req, body); res.Status != 200 {
			b.Fatalf("status %d", res.Status)
		}
	}
}
