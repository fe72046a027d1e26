package hostsim

// DefaultLogRetention is how many guest log lines a Host keeps for Logs and LogsAt
// (WithLogRetention changes it). A long-running Host (hostsim serve) logs without end, so
// it keeps the most recent lines and counts the rest (LogCount, LogsDropped); a
// WithLogWriter sees every line as it is logged.
const DefaultLogRetention = 10000

// maxLogBytes bounds the message bytes kept, whatever the line count: a guest that writes
// long lines (stdio flushes up to 64 KiB without a newline) cannot make the kept lines
// hold more than this.
const maxLogBytes = 16 << 20

// logBuffer keeps the most recent log lines, at most a retention's worth and maxLogBytes
// of messages (the newest line always), and counts every line by level.
type logBuffer struct {
	lines   []LogEntry // lines[head:] are kept, oldest first
	head    int
	bytes   int // message bytes of the kept lines
	counts  [LogCritical + 1]uint64
	dropped uint64
}

func (b *logBuffer) add(e LogEntry, retention int) {
	if retention <= 0 {
		retention = DefaultLogRetention
	}
	if int(e.Level) < len(b.counts) {
		b.counts[e.Level]++
	}
	b.lines = append(b.lines, e)
	b.bytes += len(e.Message)
	for n := len(b.lines) - b.head; n > 1 && (n > retention || b.bytes > maxLogBytes); n-- {
		b.bytes -= len(b.lines[b.head].Message)
		b.lines[b.head] = LogEntry{}
		b.head++
		b.dropped++
	}
	// Move the kept lines to the front once the forgotten ones fill half the slice, so its
	// backing array stays within twice the kept lines.
	if b.head > 0 && b.head >= len(b.lines)/2 {
		n := copy(b.lines, b.lines[b.head:])
		clear(b.lines[n:])
		b.lines, b.head = b.lines[:n], 0
	}
}

func (b *logBuffer) kept() []LogEntry { return b.lines[b.head:] }

func (b *logBuffer) count(l LogLevel) uint64 {
	if int(l) >= len(b.counts) {
		return 0
	}
	return b.counts[l]
}
