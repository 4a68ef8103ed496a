package hostcli

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/initiator"
)

// authCommands are nvme-cli's host identity and key commands:
// gen-dhchap-key, gen-hostnqn, show-hostnqn.
func authCommands() []*cli.Command {
	return []*cli.Command{
		genDHChapKeyCommand(),
		{
			Name:  "gen-hostnqn",
			Usage: "generate a host NQN of the UUID form from a random UUID",
			Description: "Prints nqn.2014-08.org.nvmexpress:uuid:<random version 4 UUID>, for example to\n" +
				"store in " + initiator.HostNQNFile + ": nvmeof gen-hostnqn > /etc/nvme/hostnqn",
			Action: cmdGenHostNQN,
		},
		{
			Name:  "show-hostnqn",
			Usage: "print the host NQN the fabrics commands use by default",
			Description: "Prints the host NQN connect, connect-all and discover use when -q is not given:\n" +
				"the contents of " + initiator.HostNQNFile + ", else one derived from the DMI product\n" +
				"UUID or /etc/machine-id.",
			Action: cmdShowHostNQN,
		},
	}
}

// genHostNQN returns a host NQN of the UUID form with a random (version 4)
// UUID read from r.
func genHostNQN(r io.Reader) (string, error) {
	var u [16]byte
	if _, err := io.ReadFull(r, u[:]); err != nil {
		return "", fmt.Errorf("random UUID: %w", err)
	}
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return fabrics.HostNQNFromUUID(u), nil
}

func cmdGenHostNQN(c *cli.Context) error {
	if c.NArg() > 0 {
		return fmt.Errorf("gen-hostnqn takes no arguments, got %q", c.Args().First())
	}
	nqn, err := genHostNQN(rand.Reader)
	if err != nil {
		return err
	}
	fmt.Fprintln(c.App.Writer, nqn)
	return nil
}

func cmdShowHostNQN(c *cli.Context) error {
	if c.NArg() > 0 {
		return fmt.Errorf("show-hostnqn takes no arguments, got %q", c.Args().First())
	}
	nqn := defaultHostNQN()
	if nqn == "" {
		// As nvme-cli's message; without a stable source every command
		// would make up a different one.
		return errors.New("hostnqn is not available -- use nvmeof gen-hostnqn")
	}
	fmt.Fprintln(c.App.Writer, nqn)
	return nil
}
