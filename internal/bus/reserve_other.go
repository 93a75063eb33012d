//go:build !linux

package bus

import "os"

// preallocate extends f to size bytes by writing zeros (not a sparse
// file: the blocks are allocated).
func preallocate(f *os.File, size int64) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	zeros := make([]byte, 64<<10)
	for off := st.Size(); off < size; {
		n := min(int64(len(zeros)), size-off)
		k, err := f.WriteAt(zeros[:n], off)
		if err != nil {
			return err
		}
		off += int64(k)
	}
	return nil
}
