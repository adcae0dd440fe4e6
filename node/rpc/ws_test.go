package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
)

func TestWS_ErrorClasses(t *testing.T) {
	_, url := startServer(t, testConfig(t), newTestHandler())
	ws := rawDial(t, url)
	tests := []struct {
		name   string
		frame  string
		code   int    // 0: success expected
		id     string // expected raw id in the reply
		result string // expected raw result on success
	}{
		{"ok echo", `{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":1}}`, 0, `1`, `{"a":1}`},
		{"string id", `{"jsonrpc":"2.0","id":"x-1","method":"echo","params":{}}`, 0, `"x-1"`, `{}`},
		{"params null is absent", `{"jsonrpc":"2.0","id":2,"method":"echo","params":null}`, 0, `2`, `null`},
		{"unknown member ignored", `{"jsonrpc":"2.0","id":3,"method":"echo","x":[1],"params":{}}`, 0, `3`, `{}`},
		{"parse error", `{"jsonrpc":"2.0","id":1,"method":`, CodeParseError, `null`, ""},
		{"parse error trailing", `{"jsonrpc":"2.0","id":1,"method":"echo"} x`, CodeParseError, `null`, ""},
		{"invalid utf8", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"e\xffcho\"}", CodeParseError, `null`, ""},
		{"not an object", `42`, CodeInvalidRequest, `null`, ""},
		{"missing jsonrpc", `{"id":4,"method":"echo"}`, CodeInvalidRequest, `4`, ""},
		{"wrong jsonrpc", `{"jsonrpc":"1.0","id":5,"method":"echo"}`, CodeInvalidRequest, `5`, ""},
		{"float id", `{"jsonrpc":"2.0","id":1.5,"method":"echo"}`, CodeInvalidRequest, `null`, ""},
		{"object id", `{"jsonrpc":"2.0","id":{},"method":"echo"}`, CodeInvalidRequest, `null`, ""},
		{"bool id", `{"jsonrpc":"2.0","id":true,"method":"echo"}`, CodeInvalidRequest, `null`, ""},
		{"null id", `{"jsonrpc":"2.0","id":null,"method":"echo"}`, CodeInvalidRequest, `null`, ""},
		{"empty method", `{"jsonrpc":"2.0","id":6,"method":""}`, CodeInvalidRequest, `6`, ""},
		{"method not string", `{"jsonrpc":"2.0","id":7,"method":7}`, CodeInvalidRequest, `7`, ""},
		{"params string", `{"jsonrpc":"2.0","id":8,"method":"echo","params":"x"}`, CodeInvalidRequest, `8`, ""},
		{"duplicate id", `{"jsonrpc":"2.0","id":9,"id":10,"method":"echo"}`, CodeInvalidRequest, `10`, ""},
		{"no method no result", `{"jsonrpc":"2.0","id":11}`, CodeInvalidRequest, `11`, ""},
		{"params array", `{"jsonrpc":"2.0","id":12,"method":"echo","params":[1,2]}`, CodeInvalidParams, `12`, ""},
		{"method not found", `{"jsonrpc":"2.0","id":13,"method":"nope"}`, CodeMethodNotFound, `13`, ""},
		{"handler MAP error", `{"jsonrpc":"2.0","id":14,"method":"fail"}`, CodeAgentNotFound, `14`, ""},
		{"plain error hidden", `{"jsonrpc":"2.0","id":15,"method":"plainerr"}`, CodeInternal, `15`, ""},
		{"panic", `{"jsonrpc":"2.0","id":16,"method":"boom"}`, CodeInternal, `16`, ""},
		{"works after panic", `{"jsonrpc":"2.0","id":17,"method":"echo","params":{"b":2}}`, 0, `17`, `{"b":2}`},
		{"trailing newline", "{\"jsonrpc\":\"2.0\",\"id\":18,\"method\":\"echo\",\"params\":{}}\n", 0, `18`, `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := decodeResp(t, roundTrip(t, ws, tt.frame))
			if string(r.ID) != tt.id {
				t.Errorf("id = %s, want %s", r.ID, tt.id)
			}
			if tt.code == 0 {
				if r.Error != nil {
					t.Fatalf("unexpected error %+v", r.Error)
				}
				if string(r.Result) != tt.result {
					t.Errorf("result = %s, want %s", r.Result, tt.result)
				}
				return
			}
			if r.Error == nil || r.Error.Code != tt.code {
				t.Fatalf("error = %+v, want code %d", r.Error, tt.code)
			}
			if r.Error.Data == nil || r.Error.Data.Category == "" {
				t.Errorf("error data lacks category: %+v", r.Error.Data)
			}
			if strings.Contains(r.Error.Message, "secret") || strings.Contains(r.Error.Message, "exploded") {
				t.Errorf("internal detail leaked: %q", r.Error.Message)
			}
		})
	}
}

func TestWS_HandlerErrorCarriesDetails(t *testing.T) {
	_, url := startServer(t, testConfig(t), newTestHandler())
	c := dialClient(t, url, nil)
	_, err := c.Call(context.Background(), "fail", nil)
	var e *Error
	if !asError(err, &e) {
		t.Fatalf("err = %v, want *Error", err)
	}
	if e.Code != CodeAgentNotFound || e.Data.Category != CategoryRouting || e.Data.Details["agentId"] != "a1" {
		t.Fatalf("error = %+v data %+v", e, e.Data)
	}
}

func TestWS_NotificationGetsNoReply(t *testing.T) {
	h := newTestHandler()
	_, url := startServer(t, testConfig(t), h)
	ws := rawDial(t, url)
	for _, n := range []string{
		`{"jsonrpc":"2.0","method":"note","params":{}}`,
		`{"jsonrpc":"2.0","method":"boom"}`,     // panicking notification: still silent
		`{"jsonrpc":"2.0","method":"nope"}`,     // unknown method: silent
		`{"jsonrpc":"2.0","method":"plainerr"}`, // failing: silent
	} {
		if err := ws.WriteMessage(websocket.TextMessage, []byte(n)); err != nil {
			t.Fatal(err)
		}
	}
	// The next frame must be the reply to this request, proving none of the
	// notifications produced one.
	r := decodeResp(t, roundTrip(t, ws, `{"jsonrpc":"2.0","id":"after","method":"echo","params":{}}`))
	if string(r.ID) != `"after"` {
		t.Fatalf("first reply has id %s", r.ID)
	}
	if got := h.notifications(); len(got) != 4 || got[0] != "note" {
		t.Fatalf("notifications seen = %v", got)
	}
}

func TestWS_Batch(t *testing.T) {
	_, url := startServer(t, testConfig(t), newTestHandler())
	ws := rawDial(t, url)
	tests := []struct {
		name  string
		frame string
		want  []string // ids in the reply array, "" = no reply frame expected
		code  int      // for non-array replies
	}{
		{"mixed", `[{"jsonrpc":"2.0","id":1,"method":"echo","params":{}},{"jsonrpc":"2.0","method":"note"},1,{"jsonrpc":"2.0","id":2,"method":"nope"}]`, []string{"1", "null", "2"}, 0},
		{"empty", `[]`, nil, CodeInvalidRequest},
		{"broken", `[{"jsonrpc":"2.0","id":1,"method":"echo"},`, nil, CodeParseError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := roundTrip(t, ws, tt.frame)
			if tt.want == nil {
				r := decodeResp(t, data)
				if r.Error == nil || r.Error.Code != tt.code || string(r.ID) != "null" {
					t.Fatalf("reply %s, want single error %d", data, tt.code)
				}
				return
			}
			var arr []wireResp
			if err := json.Unmarshal(data, &arr); err != nil {
				t.Fatalf("reply %s: %v", data, err)
			}
			if len(arr) != len(tt.want) {
				t.Fatalf("reply %s: %d elements, want %d", data, len(arr), len(tt.want))
			}
			for i, id := range tt.want {
				if string(arr[i].ID) != id {
					t.Errorf("element %d id %s, want %s", i, arr[i].ID, id)
				}
			}
		})
	}
	t.Run("only notifications", func(t *testing.T) {
		if err := ws.WriteMessage(websocket.TextMessage, []byte(`[{"jsonrpc":"2.0","method":"note"},{"jsonrpc":"2.0","method":"note"}]`)); err != nil {
			t.Fatal(err)
		}
		r := decodeResp(t, roundTrip(t, ws, `{"jsonrpc":"2.0","id":"next","method":"echo"}`))
		if string(r.ID) != `"next"` {
			t.Fatalf("got a reply to an all-notification batch: %+v", r)
		}
	})
}

func TestWS_OversizedFrameRefusedOthersUnaffected(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxFrameBytes = 64 << 10
	_, url := startServer(t, cfg, newTestHandler())
	big := rawDial(t, url)
	other := dialClient(t, url, nil)

	pad := strings.Repeat("x", 100<<10)
	data := roundTrip(t, big, `{"jsonrpc":"2.0","id":"big-1","method":"echo","params":{"p":"`+pad+`"}}`)
	r := decodeResp(t, data)
	if r.Error == nil || r.Error.Code != CodeInvalidRequest || string(r.ID) != `"big-1"` {
		t.Fatalf("oversized reply = %s", data)
	}
	if lim, _ := r.Error.Data.Details["limit"].(float64); int64(lim) != cfg.MaxFrameBytes {
		t.Fatalf("details = %v", r.Error.Data.Details)
	}
	// Same connection keeps working, and so does another one.
	r = decodeResp(t, roundTrip(t, big, `{"jsonrpc":"2.0","id":2,"method":"echo","params":{"k":1}}`))
	if string(r.Result) != `{"k":1}` {
		t.Fatalf("after oversized: %+v", r)
	}
	res, err := other.Call(context.Background(), "echo", map[string]int{"z": 9})
	if err != nil || string(res) != `{"z":9}` {
		t.Fatalf("other conn: %s %v", res, err)
	}
}

func TestWS_LargePayload300KiB(t *testing.T) {
	_, url := startServer(t, testConfig(t), newTestHandler())
	c := dialClient(t, url, nil)
	payload := map[string]string{"blob": strings.Repeat("0123456789abcdef", 300<<10/16)}
	want, _ := json.Marshal(payload)
	res, err := c.Call(context.Background(), "echo", payload)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(res, want) {
		t.Fatalf("echo of %d bytes came back as %d bytes", len(want), len(res))
	}
}

func asError(err error, target **Error) bool {
	e, ok := err.(*Error)
	if ok {
		*target = e
	}
	return ok
}
