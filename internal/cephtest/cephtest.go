// Package cephtest starts a throwaway single-node Ceph cluster (one
// monitor, manager and memstore OSD on 127.0.0.1, pool "rbd") for the
// tests of the rbd backend, with ceph-up.sh (a copy of
// ../shared/ceph-test/ceph-up.sh), and runs the rbd command against it.
package cephtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// ErrNoCeph: the Ceph daemons or the rbd command are not installed.
var ErrNoCeph = errors.New("cephtest: ceph-mon, ceph-mgr, ceph-osd or rbd not found (apt-get install ceph-mon ceph-mgr ceph-osd ceph-common)")

// Cluster is a running test cluster.
type Cluster struct {
	Dir  string // CEPH_DIR
	Conf string // its ceph.conf
	Port int    // mon msgr2 port (msgr1 is Port+1)
}

// Script is the path of ceph-up.sh (beside this file), for callers that
// start a cluster elsewhere (in another network namespace).
func Script() string {
	_, f, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(f), "ceph-up.sh")
}

// freePorts returns a port p from the kernel with p+1 free as well (the
// monitor's msgr2 and msgr1 ports), trying a bounded number of times.
func freePorts() (int, error) {
	for range 50 {
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp4", "127.0.0.1:"+strconv.Itoa(p+1))
		l.Close()
		if err == nil {
			l2.Close()
			return p, nil
		}
	}
	return 0, errors.New("cephtest: no free pair of ports")
}

// Start bootstraps a fresh cluster in dir (wiped first) and waits for it
// to be active+clean. It returns ErrNoCeph when Ceph is not installed.
func Start(dir string) (*Cluster, error) {
	for _, c := range []string{"ceph-mon", "ceph-mgr", "ceph-osd", "ceph", "rbd", "ceph-authtool", "monmaptool"} {
		if _, err := exec.LookPath(c); err != nil {
			return nil, ErrNoCeph
		}
	}
	port, err := freePorts()
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir, Port: port}
	out, err := c.script(3*time.Minute, "start")
	if err != nil {
		return nil, err
	}
	c.Conf = strings.TrimSpace(out)
	return c, nil
}

func (c *Cluster) script(timeout time.Duration, arg string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", Script(), arg)
	cmd.Env = append(os.Environ(), "CEPH_DIR="+c.Dir, "CEPH_PORT="+strconv.Itoa(c.Port), "CEPH_WAIT=150")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("cephtest: ceph-up.sh %s: %w\n%s", arg, err, stderr.String())
	}
	return stdout.String(), nil
}

// Purge stops the cluster's daemons and removes its directory.
func (c *Cluster) Purge() error {
	_, err := c.script(time.Minute, "purge")
	return err
}

// RBD runs the rbd command against the cluster and returns its stdout.
func (c *Cluster) RBD(args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "rbd", append([]string{"-c", c.Conf}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("cephtest: rbd %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// CreateImage creates an image of size bytes in pool rbd with only the
// layering feature: no exclusive lock, so that several clients may write.
func (c *Cluster) CreateImage(name string, size int64) error {
	_, err := c.RBD("create", "--size", strconv.FormatInt(size>>20, 10)+"M", "--image-feature", "layering", "rbd/"+name)
	return err
}

// Export returns the bytes of image rbd/name (rbd export).
func (c *Cluster) Export(name string) ([]byte, error) {
	return c.RBD("export", "--no-progress", "rbd/"+name, "-")
}
