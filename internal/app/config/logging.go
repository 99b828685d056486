package config

import (
	"io"
	"log/slog"

	"github.com/jetrun/jetrun/internal/app/logging"
)

// Logger builds the logger the settings ask for.
func (l Log) Logger(w io.Writer) (*slog.Logger, error) {
	return logging.New(w, l.Format, l.Level)
}
