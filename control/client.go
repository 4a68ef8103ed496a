package control

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"
)

// Client calls the control API over its Unix socket (nvmetctl).
type Client struct {
	c      net.Conn
	r      *bufio.Reader
	nextID atomic.Uint64
	// Timeout bounds each call (0: none).
	Timeout time.Duration
	// maxResponse bounds one response line (MaxResponseSize; tests).
	maxResponse int
}

// MaxResponseSize bounds one response line a Client reads: whatever
// answers on the socket must not exhaust the client's memory.
const MaxResponseSize = 64 << 20

// Dial connects to the control socket at path.
func Dial(path string) (*Client, error) {
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w (is nvmetd running, and are you root?)", path, err)
	}
	return &Client{c: c, r: bufio.NewReaderSize(c, 64<<10), Timeout: 2 * time.Minute, maxResponse: MaxResponseSize}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.c.Close() }

// Call runs method with params (nil for none) and decodes the result into
// result (unless nil). A JSON-RPC error is returned as an *Error.
func (c *Client) Call(method string, params, result any) error {
	req := struct {
		JSONRPC string `json:"jsonrpc"`
		Method  string `json:"method"`
		Params  any    `json:"params,omitempty"`
		ID      uint64 `json:"id"`
	}{Version, method, params, c.nextID.Add(1)}
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if c.Timeout > 0 {
		c.c.SetDeadline(time.Now().Add(c.Timeout))
	}
	if _, err := c.c.Write(append(b, '\n')); err != nil {
		// A daemon that refuses the connection (busy, or not this
		// user) answers and closes it before reading: its answer says
		// why, "broken pipe" does not.
		if rerr := c.refusal(); rerr != nil {
			return rerr
		}
		return fmt.Errorf("control: sending %s: %w", method, err)
	}
	line, err := readLine(c.r, c.maxResponse)
	if errors.Is(err, errTooLarge) {
		return fmt.Errorf("control: the answer to %s is larger than %d bytes", method, c.maxResponse)
	}
	if err != nil {
		return fmt.Errorf("control: reading the answer to %s: %w", method, err)
	}
	return c.decode(method, line, result)
}

// refusal returns the error a daemon answered before closing the
// connection, if it did (it is in the socket's receive queue already).
func (c *Client) refusal() error {
	c.c.SetReadDeadline(time.Now().Add(time.Second))
	line, err := readLine(c.r, c.maxResponse)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil
	}
	var e *Error
	if errors.As(c.decode("", line, nil), &e) {
		return e
	}
	return nil
}

// decode decodes a response line: its error, or its result into result.
func (c *Client) decode(method string, line []byte, result any) error {
	var resp struct {
		Response
		Error *struct {
			Code    int             `json:"code"`
			Message string          `json:"message"`
			Data    json.RawMessage `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal(line, &resp); err != nil {
		return fmt.Errorf("control: bad answer to %s: %w", method, err)
	}
	if resp.Error != nil {
		e := &Error{Code: resp.Error.Code, Message: resp.Error.Message}
		var details []ErrorDetail
		if len(resp.Error.Data) > 0 && json.Unmarshal(resp.Error.Data, &details) == nil {
			e.Data = details
		} else if len(resp.Error.Data) > 0 {
			e.Data = resp.Error.Data
		}
		return e
	}
	if result == nil {
		return nil
	}
	if len(resp.Result) == 0 {
		return errors.New("control: answer without a result")
	}
	return json.Unmarshal(resp.Result, result)
}
