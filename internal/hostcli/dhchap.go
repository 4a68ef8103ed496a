package hostcli

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/nvmeof/nvmeof/nvme/auth"
)

// DH-HMAC-CHAP secrets in the CLI. The fabrics commands take them as
// nvme-cli does (--dhchap-secret/-S, --dhchap-ctrl-secret/-C). A connection
// daemon needs them for as long as it may reconnect, but its command line
// (/proc/PID/cmdline, readable by every user) and its state file must not
// show them: connect writes them into a pipe whose read end the daemon
// inherits as descriptor 5 (secretsFD), and the daemon reads it once and
// keeps the keys in its memory only. The spec on the command line says
// no more than that secrets follow (connectArgs.DHChap).

// dhchapFlags are nvme-cli's authentication flags of discover, connect and
// connect-all.
func dhchapFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "dhchap-secret", Aliases: []string{"S"},
			Usage: "host `SECRET` for DH-HMAC-CHAP authentication, DHHC-1:hh:base64: (see gen-dhchap-key); needed when the target requires authentication"},
		&cli.StringFlag{Name: "dhchap-ctrl-secret", Aliases: []string{"C"},
			Usage: "controller `SECRET` (DHHC-1): the target must prove it knows it too (bidirectional authentication)"},
	}
}

// secretsFD is the daemon's descriptor of the secrets pipe (after the
// session's lock and report descriptors 3 and 4).
const secretsFD = 5

// daemonSecrets is what goes through the pipe.
type daemonSecrets struct {
	Host string `json:"dhchap_secret,omitempty"`
	Ctrl string `json:"dhchap_ctrl_secret,omitempty"`
}

// maxSecretsLen bounds what the daemon reads from the pipe: two DHHC-1
// strings of 64-byte keys are under 300 bytes.
const maxSecretsLen = 4096

// secretsPipe returns the read end of a pipe that holds a's secrets and
// is closed for writing, for the daemon's descriptor secretsFD. The pipe
// buffer holds them, so nothing blocks before the daemon reads.
func secretsPipe(a connectArgs) (*os.File, error) {
	b, err := json.Marshal(daemonSecrets{Host: a.DHChapSecret, Ctrl: a.DHChapCtrlSecret})
	if err != nil {
		return nil, err
	}
	defer clear(b)
	if len(b) > maxSecretsLen {
		return nil, errors.New("DH-HMAC-CHAP secrets too long")
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("secrets pipe: %w", err)
	}
	_, err = pw.Write(b)
	if cerr := pw.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		pr.Close()
		return nil, fmt.Errorf("secrets pipe: %w", err)
	}
	return pr, nil
}

// readSecrets reads the secrets a daemon inherited on fd into a.
func readSecrets(fd uintptr, a *connectArgs) error {
	f := os.NewFile(fd, "dhchap-secrets")
	if f == nil {
		return errors.New("DH-HMAC-CHAP secrets expected on descriptor 5, which is not open")
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || st.Mode()&fs.ModeNamedPipe == 0 {
		return errors.New("DH-HMAC-CHAP secrets expected on descriptor 5, which is not a pipe")
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretsLen+1))
	defer clear(b)
	if err != nil {
		return fmt.Errorf("reading the DH-HMAC-CHAP secrets: %w", err)
	}
	if len(b) > maxSecretsLen {
		return errors.New("DH-HMAC-CHAP secrets pipe holds too much")
	}
	var s daemonSecrets
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New("DH-HMAC-CHAP secrets pipe: not the connect command's format")
	}
	a.DHChapSecret, a.DHChapCtrlSecret = s.Host, s.Ctrl
	return nil
}

// parseSecrets parses a's secrets (the errors never show them).
func (a connectArgs) parseSecrets() (host, ctrl *auth.Key, err error) {
	if a.DHChapSecret != "" {
		if host, err = auth.ParseKey(a.DHChapSecret); err != nil {
			return nil, nil, fmt.Errorf("--dhchap-secret: %w", err)
		}
	}
	if a.DHChapCtrlSecret != "" {
		if ctrl, err = auth.ParseKey(a.DHChapCtrlSecret); err != nil {
			return nil, nil, fmt.Errorf("--dhchap-ctrl-secret: %w", err)
		}
		if host == nil {
			return nil, nil, errors.New("--dhchap-ctrl-secret needs --dhchap-secret (the host authenticates first)")
		}
	}
	return host, ctrl, nil
}

// genDHChapKeyCommand is nvme-cli's gen-dhchap-key.
func genDHChapKeyCommand() *cli.Command {
	return &cli.Command{
		Name:  "gen-dhchap-key",
		Usage: "generate a DH-HMAC-CHAP secret for NVMe in-band authentication",
		Description: "Prints a new secret in the DHHC-1 representation (DHHC-1:hh:base64 of the key and\n" +
			"its CRC-32:), as `nvme gen-dhchap-key` does: give it to the host with\n" +
			"connect --dhchap-secret and to the target's host entry (nvmetd: dhchap_key).\n" +
			"--hmac 1, 2 or 3 stores the key transformed with HMAC-SHA-256, -384 or -512 and\n" +
			"the host NQN (--nqn, default: what show-hostnqn prints), and fixes the length to\n" +
			"the hash's (32, 48, 64). --secret gives the key bytes in hex instead of random ones.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "secret", Aliases: []string{"s"}, Usage: "key bytes in `HEX` (default: random)"},
			&cli.UintFlag{Name: "key-length", Aliases: []string{"l"}, DefaultText: "32, or the hash's size with --hmac",
				Usage: "key length in `BYTES`: 32, 48 or 64"},
			&cli.StringFlag{Name: "nqn", Aliases: []string{"n"}, DefaultText: "the default host NQN",
				Usage: "host `NQN` for the key transformation"},
			&cli.UintFlag{Name: "hmac", Aliases: []string{"m"},
				Usage: "`HMAC` function of the key transformation: 0 none, 1 SHA-256, 2 SHA-384, 3 SHA-512"},
		},
		Action: cmdGenDHChapKey,
	}
}

// genDHChapKey makes a key as nvme-cli's gen_dhchap_key: the checks and
// defaults of its flags, then libnvme's nvme_gen_dhchap_key through
// auth.GenerateKey. secretHex "" means random bytes from r.
func genDHChapKey(secretHex string, keyLen, hmacID uint, nqn string, r io.Reader) (*auth.Key, error) {
	if hmacID > 3 {
		return nil, fmt.Errorf("invalid HMAC identifier %d (0 none, 1 SHA-256, 2 SHA-384, 3 SHA-512)", hmacID)
	}
	h := auth.HashID(hmacID)
	if h != auth.HashNone {
		if keyLen == 0 {
			keyLen = uint(h.Size())
		} else if keyLen != uint(h.Size()) {
			return nil, fmt.Errorf("invalid key length %d for %s: it needs %d", keyLen, h, h.Size())
		}
	} else if keyLen == 0 {
		keyLen = 32
	}
	if keyLen != 32 && keyLen != 48 && keyLen != 64 {
		return nil, fmt.Errorf("invalid key length %d: want 32, 48 or 64", keyLen)
	}
	if secretHex != "" {
		raw, err := hex.DecodeString(secretHex)
		if err != nil {
			return nil, errors.New("invalid --secret: want hexadecimal digits")
		}
		defer clear(raw)
		if uint(len(raw)) != keyLen {
			return nil, fmt.Errorf("invalid --secret: %d bytes, the key length is %d", len(raw), keyLen)
		}
		r = bytes.NewReader(raw)
	}
	if h != auth.HashNone && nqn == "" {
		return nil, errors.New("no host NQN for the key transformation: give --nqn (see show-hostnqn)")
	}
	return auth.GenerateKey(h, int(keyLen), nqn, r)
}

func cmdGenDHChapKey(c *cli.Context) error {
	if c.NArg() > 0 {
		return fmt.Errorf("gen-dhchap-key takes no arguments, got %q", c.Args().First())
	}
	nqn := c.String("nqn")
	if nqn == "" {
		nqn = defaultHostNQN()
	}
	k, err := genDHChapKey(c.String("secret"), c.Uint("key-length"), c.Uint("hmac"), nqn, nil)
	if err != nil {
		return err
	}
	fmt.Fprintln(c.App.Writer, k.Encode())
	return nil
}
