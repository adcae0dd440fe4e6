package runs

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/concordmap/concord/node/internal/jsonkit"
	"github.com/concordmap/concord/node/rpc"
)

// invalidParams fails unless err is nil or a -32602 *rpc.Error.
func invalidParams(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams {
		t.Fatalf("error %v is not -32602", err)
	}
}

func FuzzDecodeReply(f *testing.F) {
	for _, s := range []string{
		`{"to":{"agent":"concord.runs"},"payload":{"kind":"round","output":{}},"meta":{"isResult":true,"correlationId":"r/r0/p1"}}`,
		`{"to":"concord.runs","payload":{"kind":"error","error":"boom"},"meta":{"correlationId":"r/report/p1"}}`,
		`{"payload":{"kind":"error","error":{"nested":1}},"meta":{"correlationId":"x"}}`,
		`{"payload":"x","meta":{"correlationId":"","isResult":"yes"}}`,
		`{"payload":null,"meta":null}`, `[]`, `null`, ``, `{"meta":[]}`, "{\"payload\":1,\"meta\":{\"correlationId\":\"\xff\"}}",
		`{"payload":{{}},"meta":{"correlationId":"0"}}`, `{"p\u0061yload":[1,{"a":"]"}],"meta":{"correlationId":"x"}} `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		r, err := decodeReply(json.RawMessage(raw))
		invalidParams(t, err)
		// meta is decoded as the map-based decoder it replaced did.
		var metaRaw, payload []byte
		if jsonkit.Members(raw, func(k string, v []byte) error {
			switch k {
			case "meta":
				metaRaw = v
			case "payload":
				payload = v
			}
			return nil
		}) == nil && len(payload) > 0 && string(payload) != "null" && len(metaRaw) > 0 && string(metaRaw) != "null" {
			id, ok := refMetaTaskID(metaRaw)
			if ok != (err == nil) || ok && id != r.taskID {
				t.Fatalf("meta %q: reference %q %v, got %q %v", metaRaw, id, ok, r.taskID, err)
			}
		}
		if err != nil {
			return
		}
		if r.taskID == "" || len(r.payload) == 0 {
			t.Fatalf("accepted reply without task id or payload: %+v", r)
		}
		if r.failed && (r.errMsg == "" || len(r.errMsg) > maxReasonLen) {
			t.Fatalf("error answer with message %q", r.errMsg)
		}
		// Params come from a parsed JSON-RPC frame; for valid JSON the
		// payload handed on is exactly one valid value.
		if json.Valid(raw) && !json.Valid(r.payload) {
			t.Fatalf("payload is not JSON: %q", r.payload)
		}
		_ = runOfTask(r.taskID)
	})
}

func FuzzDecodeParams(f *testing.F) {
	for _, s := range []string{
		`{"request":{"requestId":"r","task":"t","participants":[{"id":"a"},{"id":"b"}]}}`,
		`{"runId":"01J","include":["result","events","state"]}`,
		`{"runId":"01J","include":["x"]}`, `{"runId":5}`,
		`{"status":"running","limit":10,"cursor":"01J"}`, `{"limit":-1}`, `{"limit":1e3}`,
		`{"runId":"01J","reason":"because"}`, `null`, `[]`, `"x"`, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		p := json.RawMessage(raw)
		req, err := decodeStart(p)
		invalidParams(t, err)
		if err == nil && (len(req) == 0 || req[0] != '{') {
			t.Fatalf("start accepted request %q", req)
		}
		id, _, err := decodeGet(p)
		invalidParams(t, err)
		if err == nil && id == "" {
			t.Fatal("get accepted an empty run id")
		}
		lp, err := decodeList(p, 100, 1000)
		invalidParams(t, err)
		if err == nil && (lp.limit < 1 || lp.limit > 1000) {
			t.Fatalf("list accepted limit %d", lp.limit)
		}
		id, reason, err := decodeCancel(p)
		invalidParams(t, err)
		if err == nil && (id == "" || len(reason) > maxReasonLen) {
			t.Fatalf("cancel accepted %q %d", id, len(reason))
		}
	})
}

// refMetaTaskID is the previous, map-based decoding of a reply's meta.
func refMetaTaskID(metaRaw []byte) (string, bool) {
	meta, err := rpc.ParseParams(metaRaw)
	if err != nil {
		return "", false
	}
	id, err := meta.RequiredString("correlationId")
	if err != nil {
		return "", false
	}
	if v, ok := meta["isResult"]; ok && string(v) != "true" && string(v) != "false" {
		return "", false
	}
	return id, true
}
