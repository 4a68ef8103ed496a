package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/nvmeof/nvmeof/target/bdev"
)

// smartDriveDBFlag names a fuller drive database for the SMART / Health
// log page of SATA block backends (docs/smart.md).
var smartDriveDBFlag = &cli.StringFlag{
	Name: "smart-drivedb",
	Usage: "read SATA SMART attribute names and raw-value conversions from `FILE` (YAML made with " +
		"github.com/dswarbrick/smart's cmd/mkdrivedb from smartmontools' drivedb.h) instead of the built-in DEFAULT entry",
}

// loadDriveDB loads the drive database --smart-drivedb names, if any.
// A file that cannot be read or parsed stops nvmetd (and --check): a
// database given and silently not used would leave SATA health values
// decoded with the wrong units.
func loadDriveDB(c *cli.Context) error {
	path := c.String(smartDriveDBFlag.Name)
	if path == "" {
		return nil
	}
	if err := bdev.LoadDriveDB(path); err != nil {
		return fmt.Errorf("--smart-drivedb: %w", err)
	}
	return nil
}
