//go:build !(linux && cgo)

package gpucheck

import "errors"

// CUDA needs cgo to load libcuda.
type CUDA struct{}

func OpenCUDA(string) (*CUDA, error) {
	return nil, errors.New("built without cgo, cannot load libcuda")
}

func (*CUDA) Alloc(uint64) (uint64, error) { return 0, errors.New("built without cgo") }

func (*CUDA) Free(uint64) error { return errors.New("built without cgo") }
