package control

import (
	"encoding/json"
	"testing"
)

// FuzzParseRequest: any line gets a request or a JSON-RPC error, never a
// panic; a request has a method and params that are an object.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","method":"port.list","id":1}`,
		`{"jsonrpc":"2.0","method":"ns.add","params":{"nqn":"x","size":"1MiB"},"id":"a"}`,
		`{"jsonrpc":"2.0","method":"x"}`,
		`[1,2]`, `null`, `{"id":{}}`, `{"jsonrpc":"2.0","method":"x","params":[],"id":null}`,
		"\xff", `{"jsonrpc":"2.0","method":"x","id":1e999}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		req, err := parseRequest(line)
		if err != nil {
			if err.Code >= 0 || err.Message == "" {
				t.Fatalf("bad error %+v", err)
			}
			return
		}
		if req.Method == "" || req.JSONRPC != Version {
			t.Fatalf("request %+v accepted", req)
		}
		if len(req.Params) > 0 {
			var m map[string]json.RawMessage
			if e := json.Unmarshal(req.Params, &m); e != nil {
				t.Fatalf("params %q are not an object: %v", req.Params, e)
			}
		}
		// Any method with these params answers without a panic.
		var p struct{}
		_ = decodeParams(req.Params, &p)
	})
}
