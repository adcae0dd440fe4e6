package raftstore

import (
	"context"
	"io"
	"log"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// levelTrace is where hclog's Trace lands in slog: below Debug, so it is
// off unless a handler asks for it explicitly.
const levelTrace = slog.LevelDebug - 4

// hclogAdapter lets hashicorp/raft (which wants an hclog.Logger) log through
// the Store's slog.Logger, so one handler decides format and level. The
// level is the handler's: SetLevel is ignored. Safe for concurrent use.
type hclogAdapter struct {
	log     *slog.Logger
	name    string
	implied []any
}

var _ hclog.Logger = (*hclogAdapter)(nil)

func newHCLogAdapter(l *slog.Logger, name string) *hclogAdapter {
	return &hclogAdapter{log: l.With("logger", name), name: name}
}

func toSlogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return levelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

func (a *hclogAdapter) enabled(l slog.Level) bool {
	return a.log.Enabled(context.Background(), l)
}

// The methods below implement hclog.Logger.

func (a *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off {
		return
	}
	a.log.Log(context.Background(), toSlogLevel(level), msg, args...)
}

func (a *hclogAdapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }
func (a *hclogAdapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }
func (a *hclogAdapter) Info(msg string, args ...any)  { a.Log(hclog.Info, msg, args...) }
func (a *hclogAdapter) Warn(msg string, args ...any)  { a.Log(hclog.Warn, msg, args...) }
func (a *hclogAdapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }

func (a *hclogAdapter) IsTrace() bool { return a.enabled(levelTrace) }
func (a *hclogAdapter) IsDebug() bool { return a.enabled(slog.LevelDebug) }
func (a *hclogAdapter) IsInfo() bool  { return a.enabled(slog.LevelInfo) }
func (a *hclogAdapter) IsWarn() bool  { return a.enabled(slog.LevelWarn) }
func (a *hclogAdapter) IsError() bool { return a.enabled(slog.LevelError) }

func (a *hclogAdapter) ImpliedArgs() []any { return a.implied }

func (a *hclogAdapter) With(args ...any) hclog.Logger {
	implied := append(append([]any(nil), a.implied...), args...)
	return &hclogAdapter{log: a.log.With(args...), name: a.name, implied: implied}
}

func (a *hclogAdapter) Name() string { return a.name }

func (a *hclogAdapter) Named(name string) hclog.Logger {
	if a.name != "" {
		name = a.name + "." + name
	}
	return a.ResetNamed(name)
}

func (a *hclogAdapter) ResetNamed(name string) hclog.Logger {
	// a.log already carries a "logger" attribute; slog cannot remove it,
	// so the new name is added under its own key.
	return &hclogAdapter{log: a.log.With("logger_name", name), name: name, implied: a.implied}
}

// SetLevel is ignored: the slog handler owns the level.
func (a *hclogAdapter) SetLevel(hclog.Level) {}

func (a *hclogAdapter) GetLevel() hclog.Level {
	switch {
	case a.IsTrace():
		return hclog.Trace
	case a.IsDebug():
		return hclog.Debug
	case a.IsInfo():
		return hclog.Info
	case a.IsWarn():
		return hclog.Warn
	case a.IsError():
		return hclog.Error
	}
	return hclog.Off
}

func (a *hclogAdapter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	level := slog.LevelInfo
	if opts != nil && opts.ForceLevel != hclog.NoLevel {
		level = toSlogLevel(opts.ForceLevel)
	}
	return slog.NewLogLogger(a.log.Handler(), level)
}

func (a *hclogAdapter) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	return a.StandardLogger(opts).Writer()
}
