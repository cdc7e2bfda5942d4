//go:build !(linux && cgo)

package nvml

import (
	"context"
	"errors"
)

type cudaAPI struct{}

func openCUDACheckpointAPI() (*cudaAPI, error) {
	return nil, errors.New("built without cgo, cannot load libcuda")
}

func (*cudaAPI) CheckpointMechanism() string           { return "" }
func (*cudaAPI) CheckpointUnavailable() string         { return "built without cgo" }
func (*cudaAPI) Checkpoint(context.Context, int) error { return errors.ErrUnsupported }
func (*cudaAPI) Restore(context.Context, int) error    { return errors.ErrUnsupported }
