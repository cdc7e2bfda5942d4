//go:build !(linux && cgo)

package nvml

import (
	"context"
	"errors"

	"github.com/caravan-gpu/caravan/gpu"
)

type cudaAPI struct{}

func openCUDACheckpointAPI() (*cudaAPI, error) {
	return nil, errors.New("built without cgo, cannot load libcuda")
}

func (*cudaAPI) CheckpointMechanism() string           { return "" }
func (*cudaAPI) CheckpointUnavailable() string         { return "built without cgo" }
func (*cudaAPI) Checkpoint(context.Context, int) error { return errors.ErrUnsupported }
func (*cudaAPI) Restore(context.Context, int) error    { return errors.ErrUnsupported }
func (*cudaAPI) CheckpointState(context.Context, int) (gpu.CheckpointState, error) {
	return 0, errors.ErrUnsupported
}
