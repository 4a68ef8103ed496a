package blockdev

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestNBDConnectAttrs checks NBD_CMD_CONNECT's attributes byte by byte
// against the layout nbd-netlink.h and nla_put() give (little-endian host).
func TestNBDConnectAttrs(t *testing.T) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("golden bytes are for a little-endian host")
	}
	got := nbdConnectAttrs(7, 64<<20, 512, NBDFlagHasFlags|NBDFlagSendFlush|NBDFlagSendTrim, 30*time.Second, "nvmeof:x")
	want := []byte{
		12, 0, 2, 0, 0, 0, 0, 4, 0, 0, 0, 0, // NBD_ATTR_SIZE_BYTES = 64 MiB
		12, 0, 3, 0, 0, 2, 0, 0, 0, 0, 0, 0, // NBD_ATTR_BLOCK_SIZE_BYTES = 512
		12, 0, 5, 0, 0x25, 0, 0, 0, 0, 0, 0, 0, // NBD_ATTR_SERVER_FLAGS
		12, 0, 4, 0, 30, 0, 0, 0, 0, 0, 0, 0, // NBD_ATTR_TIMEOUT = 30 s
		16, 0, 7, 0x80, // NBD_ATTR_SOCKETS | NLA_F_NESTED
		12, 0, 1, 0x80, // NBD_SOCK_ITEM | NLA_F_NESTED
		8, 0, 1, 0, 7, 0, 0, 0, // NBD_SOCK_FD = 7
		13, 0, 10, 0, 'n', 'v', 'm', 'e', 'o', 'f', ':', 'x', 0, 0, 0, 0, // NBD_ATTR_BACKEND_IDENTIFIER
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("attrs\n got % x\nwant % x", []byte(got), want)
	}
	attrs, err := parseNLAttrs(got)
	if err != nil || len(attrs) != 6 {
		t.Fatalf("parse: %d attrs, %v", len(attrs), err)
	}
	socks, err := parseNLAttrs(attrs[4].Value)
	if err != nil || len(socks) != 1 || socks[0].Type != nbdSockItem {
		t.Fatalf("sockets: %v %v", socks, err)
	}
	fd, err := parseNLAttrs(socks[0].Value)
	if err != nil || len(fd) != 1 || binary.NativeEndian.Uint32(fd[0].Value) != 7 {
		t.Fatalf("sock fd: %v %v", fd, err)
	}

	msg := genlMessage(0x1a, unix.NLM_F_REQUEST|unix.NLM_F_ACK, 3, nbdCmdConnect, nbdGenlVersion, got)
	if len(msg) != 20+len(got) || binary.NativeEndian.Uint32(msg) != uint32(len(msg)) ||
		binary.NativeEndian.Uint16(msg[4:]) != 0x1a || binary.NativeEndian.Uint16(msg[6:]) != 5 ||
		binary.NativeEndian.Uint32(msg[8:]) != 3 || msg[16] != 1 || msg[17] != 1 {
		t.Fatalf("message header % x", msg[:20])
	}
}

func TestNBDIndexFromReply(t *testing.T) {
	var a nlAttrs
	a.putU32(nbdAttrIndex, 3)
	if idx, err := nbdIndexFromReply([][]byte{a}); err != nil || idx != 3 {
		t.Fatalf("index %d, %v", idx, err)
	}
	if _, err := nbdIndexFromReply([][]byte{nil}); err == nil {
		t.Fatal("missing index accepted")
	}
	if _, err := nbdIndexFromReply([][]byte{{8, 0, 1}}); err == nil {
		t.Fatal("truncated attribute accepted")
	}
}

func TestParseNLAttrs(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		n    int
		ok   bool
	}{
		{"empty", nil, 0, true},
		{"one u32", []byte{8, 0, 1, 0, 1, 2, 3, 4}, 1, true},
		{"unpadded last", []byte{5, 0, 1, 0, 'x'}, 1, true},
		{"padded two", []byte{5, 0, 1, 0, 'x', 0, 0, 0, 4, 0, 2, 0}, 2, true},
		{"short header", []byte{8, 0}, 0, false},
		{"length below header", []byte{2, 0, 1, 0}, 0, false},
		{"length past end", []byte{9, 0, 1, 0, 1, 2, 3, 4}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			attrs, err := parseNLAttrs(tc.in)
			if (err == nil) != tc.ok || len(attrs) != tc.n {
				t.Fatalf("%d attrs, %v", len(attrs), err)
			}
		})
	}
}

// TestGenlFamily resolves real families through the kernel: nlctrl always
// exists (id GENL_ID_CTRL); "nbd" only with the nbd module.
func TestGenlFamily(t *testing.T) {
	g, err := dialGenl()
	if err != nil {
		t.Skipf("no generic netlink: %v", err)
	}
	defer g.Close()
	id, err := g.family("nlctrl")
	if err != nil || id != unix.GENL_ID_CTRL {
		t.Fatalf("nlctrl: id %#x, %v", id, err)
	}
	if _, err := g.family("nosuchfamily"); !errors.Is(err, errNoFamily) {
		t.Fatalf("missing family: %v", err)
	}
	id, err = g.family(nbdGenlName)
	t.Logf("nbd family: id %#x, %v; nbdAvailable() = %v", id, err, nbdAvailable())
}

func FuzzParseNetlink(f *testing.F) {
	f.Add([]byte{8, 0, 1, 0, 1, 2, 3, 4})
	f.Add(genlMessage(0x10, 0, 1, 3, 2, []byte{8, 0, 1, 0, 1, 2, 3, 4}))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if attrs, err := parseNLAttrs(b); err == nil {
			var re nlAttrs
			for _, a := range attrs {
				re.put(a.Type, a.Value)
			}
			if again, err := parseNLAttrs(re); err != nil || len(again) != len(attrs) {
				t.Fatalf("re-encoded attributes do not parse back: %v", err)
			}
		}
		if msgs, err := parseNLMessages(b); err == nil {
			for _, m := range msgs {
				_, _ = parseNLAttrs(m.Data)
			}
		}
		_, _ = nbdIndexFromReply([][]byte{b})
	})
}
