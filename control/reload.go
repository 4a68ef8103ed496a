package control

import (
	"errors"
	"fmt"

	"github.com/nvmeof/nvmeof/target/reconcile"
)

// ReloadResult is config.reload's result.
type ReloadResult struct {
	// Dropped counts the changes made through the control API and not
	// saved that the reload replaced.
	Dropped int `json:"dropped_changes"`
}

// ErrNoConfigFile is Reload's error when the daemon runs without a
// configuration file (nvmetd's embedded default).
var ErrNoConfigFile = errors.New("no configuration file to reload (nvmetd runs its embedded default: start it with --config FILE)")

// ReloadError is a Reload whose configuration did not load: nothing was
// applied.
type ReloadError struct{ Err error }

func (e *ReloadError) Error() string {
	return fmt.Sprintf("reload refused: the configuration has errors; the running one stays:\n%v", e.Err)
}

func (e *ReloadError) Unwrap() error { return e.Err }

// Reload loads the daemon's configuration file again (Options.Load) and
// applies it all or nothing, serialized with the control API's changes: a
// SIGHUP and config.reload (nvmetctl reload) both come here, and log the
// outcome. It returns the number of unsaved control API changes the file
// replaced. Errors: ErrNoConfigFile, a *ReloadError (the file has
// errors), a *reconcile.NotAppliedError (nothing applied), or another error
// (past the checks, part of it failed).
func (s *Service) Reload() (dropped int, err error) {
	if s.opts.Load == nil {
		s.log.Warn("reload: " + ErrNoConfigFile.Error())
		return 0, ErrNoConfigFile
	}
	tree, err := s.opts.Load()
	if err != nil {
		s.log.Error("reload refused: the configuration has errors; the running one stays", "error", err)
		return 0, &ReloadError{Err: err}
	}
	dropped, err = s.apply(tree)
	var na *reconcile.NotAppliedError
	switch {
	case errors.As(err, &na):
		s.log.Error("reload refused: nothing applied; the running configuration stays", "error", err)
		return 0, err
	case err != nil:
		// Past the checks: what validation and preparation should rule out.
		s.log.Error("reload applied, but some of it failed", "error", err)
	default:
		s.log.Info("configuration reloaded")
	}
	return dropped, err
}

// configReload is config.reload: Reload, with its errors as the API's.
func (s *Service) configReload(*noParams) (any, *Error) {
	dropped, err := s.Reload()
	var re *ReloadError
	var na *reconcile.NotAppliedError
	switch {
	case err == nil:
		return ReloadResult{Dropped: dropped}, nil
	case errors.Is(err, ErrNoConfigFile):
		return nil, refused("%v", err)
	case errors.As(err, &re):
		return nil, errorf(CodeInvalidConfig, "%v", err)
	case errors.As(err, &na):
		return nil, errorf(CodeNotApplied, "reload refused, nothing applied; the running configuration stays:\n%v", err)
	default:
		return nil, errorf(CodePartlyApplied, "reload applied, but some of it failed:\n%v", err)
	}
}
