package runview

import (
	"context"

	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// SetLatest replaces v's read of a run's row from the bucket's leader.
func (v *View) SetLatest(latest func(ctx context.Context, id string) (*jetruntype.Run, uint64, error)) {
	v.latest = latest
}
