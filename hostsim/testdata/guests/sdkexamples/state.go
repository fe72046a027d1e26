package main

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

const sharedDataKey = "shared_data_key"

// initSharedData is shared_data's OnVMStart: the key is set empty (not counted yet).
func initSharedData() {
	if err := proxywasm.SetSharedData(sharedDataKey, nil, 0); err != nil {
		proxywasm.LogWarnf("error setting shared data on OnVMStart: %v", err)
	}
}

// shared_data: every request adds one to a little-endian counter in shared data with a
// compare-and-swap, retrying on a CAS mismatch, and logs "shared value: <n>".
type sharedData struct{ types.DefaultPluginContext }

func newSharedData(uint32) types.PluginContext { return &sharedData{} }

func (*sharedData) NewHttpContext(uint32) types.HttpContext { return &countingStream{} }

type countingStream struct{ types.DefaultHttpContext }

func (*countingStream) OnHttpRequestHeaders(int, bool) types.Action {
	for {
		v, err := increment()
		if errors.Is(err, types.ErrorStatusCasMismatch) {
			continue
		}
		if err == nil {
			proxywasm.LogInfof("shared value: %d", v)
		}
		return types.ActionContinue
	}
}

func increment() (uint64, error) {
	data, cas, err := proxywasm.GetSharedData(sharedDataKey)
	if err != nil {
		proxywasm.LogWarnf("error getting shared data: %v", err)
		return 0, err
	}
	var next uint64 = 1
	if len(data) >= 8 {
		next = binary.LittleEndian.Uint64(data) + 1
	}
	if err := proxywasm.SetSharedData(sharedDataKey, binary.LittleEndian.AppendUint64(nil, next), cas); err != nil {
		return 0, err
	}
	return next, nil
}

// shared_queue's receiver: the plugin configuration is a queue name it registers; each
// notification dequeues one item and logs it ("dequeued data from <queue>...").
type queueReceiver struct {
	types.DefaultPluginContext
	contextID uint32
	queue     string
}

func newQueueReceiver(id uint32) types.PluginContext { return &queueReceiver{contextID: id} }

func (p *queueReceiver) OnPluginStart(int) types.OnPluginStartStatus {
	p.queue = string(pluginConfig())
	id, err := proxywasm.RegisterSharedQueue(p.queue)
	if err != nil {
		proxywasm.LogCriticalf("register queue %q: %v", p.queue, err)
		return types.OnPluginStartStatusFailed
	}
	proxywasm.LogInfof("queue %q registered as queueID=%d by contextID=%d", p.queue, id, p.contextID)
	return types.OnPluginStartStatusOK
}

func (p *queueReceiver) OnQueueReady(id uint32) {
	data, err := proxywasm.DequeueSharedQueue(id)
	switch err {
	case nil:
		proxywasm.LogInfof("(contextID=%d) dequeued data from %s(queueID=%d): %s", p.contextID, p.queue, id, data)
	case types.ErrorStatusEmpty:
	default:
		proxywasm.LogCriticalf("dequeue %d: %v", id, err)
	}
}

// shared_queue's sender, with the plugin configuration "http": each request header goes to
// the receiver VM's http_request_headers queue and each response header to its
// http_response_headers queue, as {"key": ...,"value": ...}, logged as "enqueued data: ...".
// Other configurations (the example's "tcp", a network filter) serve no HTTP stream.
type queueSender struct {
	types.DefaultPluginContext
	config string
}

func newQueueSender(uint32) types.PluginContext { return &queueSender{} }

func (p *queueSender) OnPluginStart(int) types.OnPluginStartStatus {
	p.config = string(pluginConfig())
	return types.OnPluginStartStatusOK
}

func (p *queueSender) NewHttpContext(uint32) types.HttpContext {
	if p.config != "http" {
		return nil
	}
	req, err := proxywasm.ResolveSharedQueue("receiver", "http_request_headers")
	if err != nil {
		proxywasm.LogCriticalf("resolve http_request_headers: %v", err)
	}
	resp, err := proxywasm.ResolveSharedQueue("receiver", "http_response_headers")
	if err != nil {
		proxywasm.LogCriticalf("resolve http_response_headers: %v", err)
	}
	return &sendingStream{req: req, resp: resp}
}

type sendingStream struct {
	types.DefaultHttpContext
	req, resp uint32
}

func (c *sendingStream) OnHttpRequestHeaders(int, bool) types.Action {
	enqueueHeaders(c.req, proxywasm.GetHttpRequestHeaders)
	return types.ActionContinue
}

func (c *sendingStream) OnHttpResponseHeaders(int, bool) types.Action {
	enqueueHeaders(c.resp, proxywasm.GetHttpResponseHeaders)
	return types.ActionContinue
}

func enqueueHeaders(queue uint32, get func() ([][2]string, error)) {
	hs, err := get()
	if err != nil {
		proxywasm.LogCriticalf("headers: %v", err)
	}
	for _, h := range hs {
		msg := fmt.Sprintf(`{"key": "%s","value": "%s"}`, h[0], h[1])
		if err := proxywasm.EnqueueSharedQueue(queue, []byte(msg)); err != nil {
			proxywasm.LogCriticalf("enqueue: %v", err)
			continue
		}
		proxywasm.LogInfof("enqueued data: %s", msg)
	}
}

// randUint32 draws from the host's random_get (crypto/rand), as the example does.
func randUint32() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint32(b[:])
}
