package session

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// Control socket operations.
const (
	OpState      = "state"      // the current State
	OpDisconnect = "disconnect" // unmap, shut the controller down, exit
	OpIdentify   = "identify"   // Identify Controller (NSID 0) or Namespace (NSID n): Data holds 4096 bytes
	OpSMARTLog   = "smart-log"  // SMART / Health log page: Data holds 512 bytes
	OpAdmin      = "admin"      // a read-only admin command (see AdminOpcodes): SQE in, Data and Result out
	OpReset      = "reset"      // controller reset: CC.EN 0, then a new association
	OpRDMAStats  = "rdma-stats" // the RDMA devices' counters (Response.RDMA)
	OpAddPath    = "add-path"   // connect another path of the subsystem (Spec), multipath
	// OpRemovePath disconnects one path (Path, e.g. nvmeof0c1) of the
	// subsystem: the answer carries the new State. The last path is a
	// whole disconnect: the answer has no State and the daemon exits.
	OpRemovePath = "remove-path"
)

// Request is one control request.
type Request struct {
	Op   string `json:"op"`
	NSID uint32 `json:"nsid,omitempty"`
	// SQE is OpAdmin's 64-byte submission queue entry and DataLen the
	// length of the data it reads from the controller.
	SQE     []byte `json:"sqe,omitempty"`
	DataLen int    `json:"data_len,omitempty"`
	// Spec is OpAddPath's connection (the CLI's connect arguments) and
	// IOPolicy the multipath I/O policy to set with it (empty: keep).
	Spec     json.RawMessage `json:"spec,omitempty"`
	IOPolicy string          `json:"iopolicy,omitempty"`
	// Path names OpRemovePath's path (PathState.Name), and the path
	// OpAdmin, OpIdentify and OpSMARTLog go to (empty: the first live
	// one).
	Path string `json:"path,omitempty"`
	// Data is what OpReservation sends to the controller.
	Data []byte `json:"data,omitempty"`
}

// Response answers a Request. Error is set when the request failed; the
// CLI prints it as is.
type Response struct {
	Error string `json:"error,omitempty"`
	State *State `json:"state,omitempty"`
	Data  []byte `json:"data,omitempty"`
	// Result is an OpAdmin completion's DW0.
	Result uint32 `json:"result,omitempty"`
	// RDMA is OpRDMAStats' answer: one entry per RDMA device the
	// daemon's paths use.
	RDMA []DeviceCounters `json:"rdma,omitempty"`
}

// DeviceCounters are one RDMA device's counters by name (the Prometheus
// names without prefix and _total, ConnectX's for the congestion ones:
// provider.Counters).
type DeviceCounters struct {
	Device   string            `json:"device"`
	Provider string            `json:"provider"`
	Counters map[string]uint64 `json:"counters"`
}

// maxMessage bounds a control message (a State with many namespaces, or
// 4 KiB of data in base64).
const maxMessage = 4 << 20

// ErrNoDaemon is returned by Call when nobody listens on the socket.
var ErrNoDaemon = errors.New("daemon not answering")

// Call sends req to the daemon listening at socketPath and returns its
// response; a Response.Error comes back as an error. ctx bounds the call.
func Call(ctx context.Context, socketPath string, req Request) (*Response, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socketPath)
	if err != nil {
		return nil, fmt.Errorf("session: %s: %w (%v)", socketPath, ErrNoDaemon, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("session: %s: %w", socketPath, err)
	}
	r := bufio.NewReaderSize(c, 64<<10)
	line, err := readLine(r)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("session: %s: no answer to %q: %w", socketPath, req.Op, ctx.Err())
		}
		return nil, fmt.Errorf("session: %s: %w", socketPath, err)
	}
	var resp Response
	if err := json.Unmarshal(line, &resp); err != nil {
		return nil, fmt.Errorf("session: %s: bad response: %w", socketPath, err)
	}
	if resp.Error != "" {
		return &resp, errors.New(resp.Error)
	}
	return &resp, nil
}

// readLine reads one newline-terminated message of at most maxMessage
// bytes.
func readLine(r *bufio.Reader) ([]byte, error) {
	var out []byte
	for {
		chunk, err := r.ReadSlice('\n')
		out = append(out, chunk...)
		if len(out) > maxMessage {
			return nil, errors.New("message too long")
		}
		switch {
		case err == nil:
			return out, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return nil, err
		}
	}
}

// Listen creates the control socket at path (replacing a stale one) with
// mode 0600: the daemon obeys whoever can connect.
func Listen(path string) (*net.UnixListener, error) {
	_ = os.Remove(path)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("session: control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("session: control socket: %w", err)
	}
	return l, nil
}

// Serve accepts control connections on l until it is closed, calling
// handle for each request (concurrently). A connection carries one request
// and must send it within timeout. Serve returns once l is closed and every
// response has been written.
func Serve(l net.Listener, timeout time.Duration, handle func(Request) Response) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			serveConn(c, timeout, handle)
		}()
	}
}

func serveConn(c net.Conn, timeout time.Duration, handle func(Request) Response) {
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	line, err := readLine(bufio.NewReaderSize(c, 4096))
	var resp Response
	var req Request
	if err != nil {
		return
	}
	if err := json.Unmarshal(line, &req); err != nil {
		resp.Error = "bad request: " + err.Error()
	} else {
		resp = handle(req)
	}
	b, err := json.Marshal(resp)
	if err != nil {
		b, _ = json.Marshal(Response{Error: err.Error()})
	}
	_ = c.SetWriteDeadline(time.Now().Add(timeout))
	_, _ = c.Write(append(b, '\n'))
}
