package session

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// State is what a daemon tells about its connection: written to
// state.json whenever it changes and returned by the control socket.
type State struct {
	Name  string `json:"name"`  // controller name, e.g. nvmeof0
	PID   int    `json:"pid"`   // the daemon's process ID
	State string `json:"state"` // the controller's state as Linux names it (live, connecting, ...)

	Transport  string `json:"transport"` // rdma or loop
	Traddr     string `json:"traddr"`
	Trsvcid    string `json:"trsvcid"`
	HostTraddr string `json:"host_traddr,omitempty"` // the local address of the RDMA device
	SubsysNQN  string `json:"subsysnqn"`
	HostNQN    string `json:"hostnqn"`
	HostID     string `json:"hostid"`

	CntlID    uint16 `json:"cntlid"`
	Serial    string `json:"serial"`
	Model     string `json:"model"`
	Firmware  string `json:"firmware"`
	IOQueues  int    `json:"io_queues"`
	QueueSize int    `json:"queue_size"`
	KATO      int    `json:"kato"` // keep-alive timeout in seconds (0: none)

	Log     string    `json:"log"` // the daemon's log file, or where it logs (a journalctl command, "stderr")
	Started time.Time `json:"started"`

	Namespaces []Namespace `json:"namespaces"`

	// IOPolicy is the multipath I/O policy and Paths the controllers
	// (paths) of the subsystem the daemon holds, the first being the one
	// the fields above describe (docs/multipath.md).
	IOPolicy string      `json:"iopolicy,omitempty"`
	Paths    []PathState `json:"paths,omitempty"`
}

// PathState is one path (controller) of a daemon's subsystem.
type PathState struct {
	Name       string `json:"name"` // nvmeof0 for the first path, then nvmeof0c1, nvmeof0c2, ...
	State      string `json:"state"`
	Transport  string `json:"transport"`
	Traddr     string `json:"traddr"`
	Trsvcid    string `json:"trsvcid"`
	HostTraddr string `json:"host_traddr,omitempty"`
	CntlID     uint16 `json:"cntlid"`
	// ANAState is the path's ANA state of the first namespace
	// (optimized for a controller without ANA reporting).
	ANAState string `json:"ana_state"`
}

// Address returns the path's target address as nvme-cli prints it.
func (p *PathState) Address() string {
	return fmt.Sprintf("traddr=%s,trsvcid=%s", p.Traddr, p.Trsvcid)
}

// NamespacePath is a namespace's state through one path.
type NamespacePath struct {
	Path     string `json:"path"`
	ANAState string `json:"ana_state"`
	Current  bool   `json:"current,omitempty"` // the I/O policy uses it now
}

// Namespace is an active namespace of the controller and its mapping.
type Namespace struct {
	NSID    uint32 `json:"nsid"`
	Generic string `json:"generic"` // e.g. nvmeof0n1: names the namespace in commands
	Device  string `json:"device,omitempty"`
	Method  string `json:"method,omitempty"` // ublk, nbd or fuse+loop
	// MapError is why the namespace is not mapped (when mapping failed
	// after the connection was made, e.g. a namespace added later).
	MapError  string `json:"map_error,omitempty"`
	BlockSize int    `json:"block_size"`
	NSZE      uint64 `json:"nsze"`
	NUSE      uint64 `json:"nuse"`
	MetaSize  int    `json:"metadata_size"`
	// Paths is the namespace's ANA state per path.
	Paths []NamespacePath `json:"paths,omitempty"`
}

// Address returns the connection's target address as nvme-cli prints it.
func (s *State) Address() string {
	return fmt.Sprintf("traddr=%s,trsvcid=%s", s.Traddr, s.Trsvcid)
}

// ReadState reads a state file.
func ReadState(path string) (*State, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("session: %s: %w", path, err)
	}
	return &s, nil
}

// WriteState writes a state file atomically (a temporary file renamed
// over it), so that readers never see half of it.
func WriteState(path string, s *State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".state-*")
	if err != nil {
		return fmt.Errorf("session: %w", err)
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("session: %w", err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("session: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("session: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("session: %w", err)
	}
	return nil
}
