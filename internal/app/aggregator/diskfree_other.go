//go:build !unix

package aggregator

// diskFree is not known here: the store is held to its max_file_store
// only.
func diskFree(string) (uint64, bool) { return 0, false }
