package rpc

import (
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestDecodeFrame(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		fatal  int   // expected whole-frame error code
		batch  bool  // expect a batch
		codes  []int // per element: 0 ok, else the error code
		kinds  []msgKind
		method string // of the first element when ok
		params string
		id     string
	}{
		{name: "request", in: `{"jsonrpc":"2.0","id":7,"method":"map/send","params":{"to":"a"}}`, codes: []int{0}, kinds: []msgKind{kindRequest}, method: "map/send", params: `{"to":"a"}`, id: "7"},
		{name: "whitespace everywhere", in: " \n{ \"jsonrpc\" : \"2.0\" , \"method\" : \"m\" , \"params\" : { } }\n", codes: []int{0}, kinds: []msgKind{kindRequest}, method: "m", params: "{ }"},
		{name: "escaped method", in: `{"jsonrpc":"2.0","id":"x","method":"map\/send"}`, codes: []int{0}, kinds: []msgKind{kindRequest}, method: "map/send", id: `"x"`},
		{name: "escaped key and version", in: `{"json\u0072pc":"2.\u0030","id":-3,"method":"m"}`, codes: []int{0}, kinds: []msgKind{kindRequest}, method: "m", id: "-3"},
		{name: "response result", in: `{"jsonrpc":"2.0","id":1,"result":{"ok":true}}`, codes: []int{0}, kinds: []msgKind{kindResponse}, id: "1"},
		{name: "response error", in: `{"jsonrpc":"2.0","id":"1","error":{"code":1,"message":"x"}}`, codes: []int{0}, kinds: []msgKind{kindResponse}, id: `"1"`},
		{name: "response null id", in: `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}`, codes: []int{0}, kinds: []msgKind{kindResponse}},
		{name: "exponent id", in: `{"jsonrpc":"2.0","id":1e3,"method":"m"}`, codes: []int{CodeInvalidRequest}},
		{name: "id at the limit", in: `{"jsonrpc":"2.0","id":"` + strings.Repeat("i", MaxIDBytes-2) + `","method":"m"}`, codes: []int{0}, kinds: []msgKind{kindRequest}, method: "m", id: `"` + strings.Repeat("i", MaxIDBytes-2) + `"`},
		{name: "id too long", in: `{"jsonrpc":"2.0","id":"` + strings.Repeat("i", 100_000) + `","method":"m"}`, codes: []int{CodeInvalidRequest}},
		{name: "method too long", in: `{"jsonrpc":"2.0","id":1,"method":"` + strings.Repeat("m", MaxMethodBytes+1) + `"}`, codes: []int{CodeInvalidRequest}},
		{name: "both result and error", in: `{"jsonrpc":"2.0","id":1,"result":1,"error":{}}`, codes: []int{CodeInvalidRequest}},
		{name: "request with result", in: `{"jsonrpc":"2.0","id":1,"method":"m","result":1}`, codes: []int{CodeInvalidRequest}},
		{name: "response without id", in: `{"jsonrpc":"2.0","result":1}`, codes: []int{CodeInvalidRequest}},
		{name: "empty", in: "", fatal: CodeParseError},
		{name: "blank", in: "  \n", fatal: CodeParseError},
		{name: "truncated", in: `{"jsonrpc":"2.0"`, fatal: CodeParseError},
		{name: "bad escape", in: `{"jsonrpc":"2.0","id":1,"method":"a\qb"}`, fatal: CodeParseError},
		{name: "control char in string", in: "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\tb\"}", fatal: CodeParseError},
		{name: "leading zero", in: `{"jsonrpc":"2.0","id":01,"method":"m"}`, fatal: CodeParseError},
		{name: "two objects", in: `{}{}`, fatal: CodeParseError},
		{name: "invalid utf8", in: "{\"jsonrpc\":\"2.0\",\"method\":\"\xc3\x28\"}", fatal: CodeParseError},
		{name: "deep nesting", in: `{"jsonrpc":"2.0","method":"m","params":{"a":` + strings.Repeat("[", 2000) + strings.Repeat("]", 2000) + `}}`, fatal: CodeParseError},
		{name: "string frame", in: `"hello"`, fatal: 0, codes: []int{CodeInvalidRequest}},
		{name: "empty batch", in: `[ ]`, fatal: CodeInvalidRequest},
		{name: "batch", in: `[{"jsonrpc":"2.0","id":1,"method":"a"}, 5, {"jsonrpc":"2.0","method":"b"}, {"jsonrpc":"2.0","id":2,"result":null}]`, batch: true,
			codes: []int{0, CodeInvalidRequest, 0, 0}, kinds: []msgKind{kindRequest, 0, kindRequest, kindResponse}, method: "a", id: "1"},
		{name: "batch trailing comma", in: `[{"jsonrpc":"2.0","method":"a"},]`, fatal: CodeParseError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := decodeFrame([]byte(tt.in), 100)
			if tt.fatal != 0 {
				if f.fatal == nil || f.fatal.code != tt.fatal {
					t.Fatalf("fatal = %+v, want %d", f.fatal, tt.fatal)
				}
				return
			}
			if f.fatal != nil {
				t.Fatalf("unexpected fatal %+v", f.fatal)
			}
			if f.batch != tt.batch || f.len() != len(tt.codes) {
				t.Fatalf("batch=%v len=%d, want %v %d", f.batch, f.len(), tt.batch, len(tt.codes))
			}
			for i, code := range tt.codes {
				m, derr := f.at(i)
				got := 0
				if derr != nil {
					got = derr.code
				}
				if got != code {
					t.Fatalf("element %d code %d (%+v), want %d", i, got, derr, code)
				}
				if derr != nil && len(derr.id) > MaxIDBytes {
					t.Fatalf("element %d: error would echo a %d-byte id", i, len(derr.id))
				}
				if code == 0 && m.kind != tt.kinds[i] {
					t.Fatalf("element %d kind %d, want %d", i, m.kind, tt.kinds[i])
				}
			}
			if tt.codes[0] != 0 {
				return
			}
			m, _ := f.at(0)
			c := &Conn{methods: map[string]string{}}
			if m.kind == kindRequest && c.methodName(m) != tt.method {
				t.Errorf("method %q, want %q", c.methodName(m), tt.method)
			}
			if string(m.params) != tt.params {
				t.Errorf("params %q, want %q", m.params, tt.params)
			}
			if string(m.id) != tt.id {
				t.Errorf("id %q, want %q", m.id, tt.id)
			}
		})
	}
}

func TestDecodeFrame_BatchLimit(t *testing.T) {
	one := `{"jsonrpc":"2.0","method":"n"}`
	in := "[" + strings.TrimSuffix(strings.Repeat(one+",", 11), ",") + "]"
	if f := decodeFrame([]byte(in), 10); f.fatal == nil || f.fatal.code != CodeInvalidRequest {
		t.Fatalf("fatal = %+v, want -32600", f.fatal)
	}
	if f := decodeFrame([]byte(in), 11); f.fatal != nil || f.len() != 11 {
		t.Fatalf("11 elements with limit 11: %+v", f.fatal)
	}
}

func TestIDFromPrefix(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"jsonrpc":"2.0","id":42,"method":"x","params":{"p":"aaaa`, "42"},
		{`{"id":"abc","params":{`, `"abc"`},
		{`{"params":{"p":"aaaa`, ""},
		{`{"id":1.5,"params":{`, ""},
		{`{"id":"trunc`, ""},
		{`[{"id":1}`, ""},
	}
	for _, tt := range tests {
		if got := string(idFromPrefix([]byte(tt.in))); got != tt.want {
			t.Errorf("idFromPrefix(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestScanValue_AgreesWithEncodingJSON(t *testing.T) {
	for _, in := range []string{
		`null`, `true`, `false`, `0`, `-0`, `-0.5e+10`, `1E-2`, `"\u00e9\n"`, `[]`, `{}`, `[1,[2,{"a":[]}]]`,
		`01`, `1.`, `.5`, `-`, `+1`, `1e`, `"\x"`, `"\u12"`, `[1,]`, `{"a"}`, `{"a":1,}`, `{,}`, `nul`, `tru`, `[`, `"`, `{"a":1 "b":2}`,
	} {
		if got, want := validJSON([]byte(in)), json.Valid([]byte(in)); got != want {
			t.Errorf("validJSON(%q) = %v, json.Valid = %v", in, got, want)
		}
	}
}

func FuzzDecodeFrame(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"map/send","params":{"to":{"agent":"a"},"payload":"hi"}}`,
		`{"jsonrpc":"2.0","method":"map/event","params":{}}`,
		`[{"jsonrpc":"2.0","id":"x","method":"a"},{"jsonrpc":"2.0","id":2,"result":{}}]`,
		`{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"nope"}}`,
		`{"json\u0072pc":"2.0","id":-1,"method":"m\/x","params":null}`, `[]`, `{`, "\xff",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		df := decodeFrame(data, 50)
		if df.fatal != nil {
			if df.fatal.code == CodeParseError && json.Valid(data) && !tooDeep(data) && validUTF8(data) {
				t.Fatalf("valid JSON %q rejected as parse error: %s", data, df.fatal.reason)
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("invalid JSON %q accepted", data)
		}
		for i := range df.len() {
			if m, derr := df.at(i); derr == nil {
				checkRoundTrip(t, m)
			}
		}
	})
}

// checkRoundTrip re-encodes a decoded request with our encoder and decodes
// it again: method, id and params must survive unchanged.
func checkRoundTrip(t *testing.T, m message) {
	if m.kind != kindRequest {
		return
	}
	c := &Conn{methods: map[string]string{}}
	method := c.methodName(m)
	var fr frame
	encodeRequest(&fr, m.id, method, m.params)
	df := decodeFrame(fr.b, 1)
	m2, derr := df.at(0)
	if df.fatal != nil || derr != nil {
		t.Fatalf("re-encoded %q does not decode: %+v %+v", fr.b, df.fatal, derr)
	}
	if c.methodName(m2) != method || string(m2.id) != string(m.id) || string(m2.params) != string(m.params) {
		t.Fatalf("round trip changed %q into %q", method, fr.b)
	}
}

func FuzzScanValue(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5e-3,"x\u00e9",true,null]}`, `"\ud800"`, `-0`, `[[[]]]`, `{"a":}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if tooDeep(data) {
			return
		}
		if got, want := validJSON(data), json.Valid(data); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid = %v", data, got, want)
		}
	})
}

func FuzzIDFromPrefix(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":42,"method":"x","params":{"p":"aa`))
	f.Fuzz(func(t *testing.T, data []byte) {
		id := idFromPrefix(data)
		if id != nil && !json.Valid(id) {
			t.Fatalf("recovered id %q is not JSON", id)
		}
	})
}

// tooDeep reports nesting beyond our limit, where we reject valid JSON.
func tooDeep(data []byte) bool {
	depth, maxDepth := 0, 0
	for _, c := range data {
		switch c {
		case '[', '{':
			depth++
			maxDepth = max(maxDepth, depth)
		case ']', '}':
			depth--
		}
	}
	return maxDepth >= maxNestingDepth
}

func validUTF8(b []byte) bool { return utf8.Valid(b) }

func TestHasSpecial8(t *testing.T) {
	for pos := range 8 {
		for c := range 256 {
			var b [8]byte
			for i := range b {
				b[i] = 'a'
			}
			b[pos] = byte(c)
			want := c < 0x20 || c == '"' || c == '\\'
			if got := hasSpecial8(binary.LittleEndian.Uint64(b[:])); got != want {
				t.Fatalf("byte %#x at %d: got %v, want %v", c, pos, got, want)
			}
		}
	}
}
