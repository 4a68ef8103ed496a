package journal

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// StreamEnv is the variable systemd sets for a service whose stdout or
// stderr is connected to the journal: "DEVICE:INODE" of that stream.
const StreamEnv = "JOURNAL_STREAM"

// IsJournalStream reports whether f is the journal stream that stream
// (the value of $JOURNAL_STREAM) names: the same device and inode, as
// sd_journal_stream_fd(3) advises, so that a redirected stderr of a child
// that inherited the variable does not count.
func IsJournalStream(f *os.File, stream string) bool {
	if f == nil || stream == "" {
		return false
	}
	var dev, ino uint64
	if n, err := fmt.Sscanf(stream, "%d:%d", &dev, &ino); err != nil || n != 2 {
		return false
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return false
	}
	return uint64(st.Dev) == dev && st.Ino == ino
}
