package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nvmeof/nvmeof/configfs"
)

// JSON-RPC 2.0 error codes: the standard ones, and the server's own in the
// range the specification leaves to applications (-32000 to -32099).
// docs/control-api.md lists them.
const (
	CodeParseError     = -32700 // the request is not JSON
	CodeInvalidRequest = -32600 // not a JSON-RPC 2.0 request object, or too large
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602 // params missing, of the wrong type, or unknown
	CodeInternal       = -32603

	// CodeInvalidConfig: the change makes a configuration the config file
	// could not hold (validation failed); data lists the errors.
	CodeInvalidConfig = -32000
	// CodeNotFound: the port, subsystem, namespace, host or controller
	// named does not exist.
	CodeNotFound = -32001
	// CodeExists: the object to add exists already.
	CodeExists = -32002
	// CodeNotApplied: the target could not apply the change (a backend
	// that does not open, a port address taken); nothing changed.
	CodeNotApplied = -32003
	// CodePartlyApplied: past its checks, part of the change failed (what
	// validation should rule out); the rest is in effect.
	CodePartlyApplied = -32004
	// CodeRefused: the change would break something (lose a memory
	// namespace's data, remove a host a subsystem allows); data may say
	// how to force it.
	CodeRefused = -32005
	// CodeIO: config.save could not write its file.
	CodeIO = -32006
	// CodeBusy: every connection slot has a request under way; the
	// connection is closed. Try again (nvmetctl does, for a while).
	CodeBusy = -32007
)

// Version is the JSON-RPC version every request and response carries.
const Version = "2.0"

// Request is a JSON-RPC 2.0 request. A request without id is a
// notification: it runs, and gets no response.
type Request struct {
	JSONRPC string          `json:"jsonrpc"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"`
	ID      json.RawMessage `json:"id,omitempty"`
}

// Response is a JSON-RPC 2.0 response: Result or Error.
type Response struct {
	JSONRPC string          `json:"jsonrpc"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
	ID      json.RawMessage `json:"id"`
}

// Error is a JSON-RPC error object. For configuration errors Data holds
// one ErrorDetail per problem.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

// Error implements error: the message (with the details, one a line, when
// the message does not already hold them).
func (e *Error) Error() string { return e.Message }

// ErrorDetail is one configuration error: the object's configfs path
// ("subsystems/NQN/namespaces/2"), the attribute and what is wrong.
type ErrorDetail struct {
	Path    string `json:"path,omitempty"`
	Attr    string `json:"attr,omitempty"`
	Message string `json:"message"`
}

func errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// parseRequest decodes one request line. The error is what to answer; the
// id is whatever could be read of it (null when none).
func parseRequest(line []byte) (*Request, *Error) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		if len(line) > 0 && line[0] == '[' {
			return nil, errorf(CodeInvalidRequest, "batch requests are not supported: send one request object a line")
		}
		if !json.Valid(line) {
			return nil, errorf(CodeParseError, "parse error: the request is not JSON")
		}
		return nil, errorf(CodeInvalidRequest, "invalid request: want a JSON-RPC 2.0 request object")
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(line, &raw); err != nil {
		return nil, errorf(CodeParseError, "parse error: %v", err)
	}
	req := &Request{ID: raw["id"]}
	if len(req.ID) > 0 {
		switch req.ID[0] {
		case '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', 'n':
		default:
			req.ID = nil
			return req, errorf(CodeInvalidRequest, "invalid request: id must be a string, a number or null")
		}
	}
	for k := range raw {
		switch k {
		case "jsonrpc", "method", "params", "id":
		default:
			return req, errorf(CodeInvalidRequest, "invalid request: unknown member %q", k)
		}
	}
	if err := json.Unmarshal(raw["jsonrpc"], &req.JSONRPC); err != nil || req.JSONRPC != Version {
		return req, errorf(CodeInvalidRequest, `invalid request: "jsonrpc" must be "2.0"`)
	}
	if err := json.Unmarshal(raw["method"], &req.Method); err != nil || req.Method == "" {
		return req, errorf(CodeInvalidRequest, `invalid request: "method" must be a non-empty string`)
	}
	if p := bytes.TrimSpace(raw["params"]); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		if p[0] != '{' {
			return req, errorf(CodeInvalidParams, "invalid params: params must be an object (by name)")
		}
		req.Params = p
	}
	return req, nil
}

// decodeParams decodes params into v, refusing unknown members (a typo
// must not be ignored).
func decodeParams(params json.RawMessage, v any) *Error {
	if len(params) == 0 {
		params = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(params))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		msg := err.Error()
		msg = strings.TrimPrefix(msg, "json: ")
		return errorf(CodeInvalidParams, "invalid params: %s", msg)
	}
	return nil
}

// configErrorDetails collects the configfs errors err holds.
func configErrorDetails(err error) []ErrorDetail {
	var out []ErrorDetail
	var walk func(error)
	walk = func(err error) {
		var ce *configfs.Error
		switch e := err.(type) {
		case nil:
			return
		case *configfs.Error:
			ce = e
		case configfs.Errors:
			for _, x := range e {
				walk(x)
			}
			return
		case interface{ Unwrap() []error }:
			for _, x := range e.Unwrap() {
				walk(x)
			}
			return
		case interface{ Unwrap() error }:
			walk(e.Unwrap())
			return
		default:
			return
		}
		out = append(out, ErrorDetail{Path: ce.Path, Attr: ce.Attr, Message: ce.Msg})
	}
	walk(err)
	return out
}

// configError makes a JSON-RPC error of a validation or apply error.
func configError(code int, prefix string, err error) *Error {
	e := &Error{Code: code, Message: prefix + ": " + err.Error()}
	if d := configErrorDetails(err); len(d) > 0 {
		e.Data = d
	}
	return e
}

// asError returns err as an *Error, or an internal error.
func asError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeInternal, Message: err.Error()}
}
