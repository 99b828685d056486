package engine

import (
	"context"

	"github.com/jetrun/jetrun/internal/engine/model"
)

// parentRowKey is the context key of WithParentRow.
type parentRowKey struct{}

// WithParentRow returns ctx carrying row, the stored row of the run that
// a nested dispatch made with ctx is a child of: a worker's Spawn passes
// it so that the dispatch need not read it to learn its tree. It is the
// engine's seam between the worker and the parent client, not a field of
// the public request.
func WithParentRow(ctx context.Context, row *model.Row) context.Context {
	return context.WithValue(ctx, parentRowKey{}, row)
}

// ParentRow returns the row WithParentRow put in ctx, or nil.
func ParentRow(ctx context.Context) *model.Row {
	r, _ := ctx.Value(parentRowKey{}).(*model.Row)
	return r
}
