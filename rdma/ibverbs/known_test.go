//go:build ibverbs && cgo

package ibverbs

// KnownFailures returns the conformance tests (rdmatest names) that fail
// on device d for a fault of the device's own, with the reason: what
// rdmatest.Options.KnownFailures takes.
func KnownFailures(d Device) map[string]string {
	if d.Info().VendorID != rxeVendorID {
		return nil
	}
	return map[string]string{
		"MW/Outside": "rxe checks an access through a memory window against the range of the window's region, " +
			"not the window's (rxe_resp.c check_rkey: mr_check_range(mw->mr, ...))",
	}
}
