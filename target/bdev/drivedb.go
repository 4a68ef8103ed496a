package bdev

import (
	_ "embed"
	"fmt"
	"maps"
	"os"
	"regexp"
	"strings"
	"sync"

	"github.com/dswarbrick/smart/drivedb"
	"gopkg.in/yaml.v3"
)

//go:embed drivedb.yaml
var defaultDriveDB []byte

var (
	driveDBMu sync.Mutex
	driveDB   *drivedb.DriveDb // nil until first used
)

// parseDriveDB decodes a drive database in the YAML form of
// github.com/dswarbrick/smart (drivedb.OpenDriveDb's format) and compiles
// its model patterns. Unlike OpenDriveDb it reports a bad pattern instead
// of leaving a nil one that LookupDrive would dereference.
func parseDriveDB(b []byte) (*drivedb.DriveDb, error) {
	var db drivedb.DriveDb
	if err := yaml.Unmarshal(b, &db); err != nil {
		return nil, fmt.Errorf("drive database: %w", err)
	}
	for i, d := range db.Drives {
		re, err := regexp.Compile(d.ModelRegex)
		if err != nil {
			return nil, fmt.Errorf("drive database: family %q: model pattern: %w", d.Family, err)
		}
		db.Drives[i].CompiledRegexp = re
	}
	return &db, nil
}

// LoadDriveDB replaces the built-in drive database (smartmontools' default
// attribute conversions) with the YAML file at path, e.g. one converted
// from smartmontools' drivedb.h with github.com/dswarbrick/smart's
// cmd/mkdrivedb, so that ATA attributes of listed models are decoded with
// their own conversions. The file must have a DEFAULT family.
func LoadDriveDB(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("bdev: %w", err)
	}
	db, err := parseDriveDB(b)
	if err != nil {
		return fmt.Errorf("bdev: %s: %w", path, err)
	}
	if !defaultFirst(db) {
		return fmt.Errorf("bdev: %s: drive database does not start with the DEFAULT family", path)
	}
	driveDBMu.Lock()
	driveDB = db
	driveDBMu.Unlock()
	return nil
}

// defaultFirst reports whether DEFAULT is the first family (after
// smartmontools' "$Id" placeholder): LookupDrive merges a model's presets
// into the DEFAULT presets it has seen so far.
func defaultFirst(db *drivedb.DriveDb) bool {
	for _, d := range db.Drives {
		if strings.HasPrefix(d.Family, "$Id") {
			continue
		}
		return d.Family == "DEFAULT"
	}
	return false
}

// lookupDrive returns the attribute conversions for an ATA model number
// (trimmed of its padding): the model's family merged over DEFAULT.
func lookupDrive(model string) drivedb.DriveModel {
	driveDBMu.Lock()
	defer driveDBMu.Unlock()
	if driveDB == nil {
		db, err := parseDriveDB(defaultDriveDB)
		if err != nil || !defaultFirst(db) {
			// Cannot happen with the embedded file (a test parses it).
			return drivedb.DriveModel{Presets: map[string]drivedb.AttrConv{}}
		}
		driveDB = db
	}
	// LookupDrive merges a family's presets into the DEFAULT entry's map,
	// which it does not copy: give it a copy so the database stays as read.
	db := drivedb.DriveDb{Drives: make([]drivedb.DriveModel, len(driveDB.Drives))}
	copy(db.Drives, driveDB.Drives)
	for i := range db.Drives {
		if db.Drives[i].Family == "DEFAULT" {
			db.Drives[i].Presets = maps.Clone(db.Drives[i].Presets)
		}
	}
	m := db.LookupDrive([]byte(strings.TrimSpace(model)))
	if m.Presets == nil {
		m.Presets = map[string]drivedb.AttrConv{}
	}
	return m
}
