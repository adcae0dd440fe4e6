package membership

import (
	"context"
	"log"
	"log/slog"
	"strings"
	"sync/atomic"
)

// newMemberlistLogger bridges memberlist's *log.Logger onto slog.
// memberlist writes lines like "[WARN] memberlist: text"; levelHandler maps
// the bracketed level onto the slog level and strips the prefixes, so
// memberlist's chatty DEBUG lines are filtered by the handler's level like
// any other debug log instead of all arriving at one fixed level.
//
// muted silences the bridge once Shutdown has returned: memberlist's probe
// goroutine may finish its current round (and log) a moment later, and the
// caller's handler may be gone by then (a finished test's output panics).
func newMemberlistLogger(l *slog.Logger, muted *atomic.Bool) *log.Logger {
	return slog.NewLogLogger(levelHandler{h: l.Handler(), muted: muted}, slog.LevelInfo)
}

// levelHandler re-levels records written through slog.NewLogLogger.
type levelHandler struct {
	h     slog.Handler
	muted *atomic.Bool
}

// Enabled cannot know the real level yet (the writer asks with the fixed
// level before the line is parsed); Handle checks again once it does.
// Asking for LevelError keeps a fully silenced handler cheap.
func (lh levelHandler) Enabled(ctx context.Context, _ slog.Level) bool {
	return lh.h.Enabled(ctx, slog.LevelError)
}

func (lh levelHandler) Handle(ctx context.Context, r slog.Record) error {
	level, msg := parseMemberlistLine(r.Message)
	if lh.muted.Load() || !lh.h.Enabled(ctx, level) {
		return nil
	}
	nr := slog.NewRecord(r.Time, level, msg, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		nr.AddAttrs(a)
		return true
	})
	return lh.h.Handle(ctx, nr)
}

func (lh levelHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return levelHandler{h: lh.h.WithAttrs(as), muted: lh.muted}
}

func (lh levelHandler) WithGroup(name string) slog.Handler {
	return levelHandler{h: lh.h.WithGroup(name), muted: lh.muted}
}

var memberlistLevels = []struct {
	prefix string
	level  slog.Level
}{
	{"[DEBUG]", slog.LevelDebug},
	{"[INFO]", slog.LevelInfo},
	{"[WARN]", slog.LevelWarn},
	{"[ERR]", slog.LevelError},
	{"[ERROR]", slog.LevelError},
}

// parseMemberlistLine returns the level named by the line's prefix (Info
// when there is none) and the text without the level and "memberlist:".
func parseMemberlistLine(line string) (slog.Level, string) {
	level := slog.LevelInfo
	for _, l := range memberlistLevels {
		if rest, ok := strings.CutPrefix(line, l.prefix); ok {
			level, line = l.level, rest
			break
		}
	}
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(line, "memberlist: ")
	if strings.HasPrefix(line, demotedPrefix) {
		level = slog.LevelDebug
	}
	return level, line
}

// demotedPrefix starts memberlist's warning for every alive message the
// AliveDelegate refuses: a misconfigured peer produces it several times a
// second. The package logs its own rate-limited "ignoring peer" instead.
const demotedPrefix = "ignoring alive message for "
