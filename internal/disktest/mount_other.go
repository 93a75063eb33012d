//go:build !linux

package disktest

import "errors"

func mount(string, int64) error { return errors.New("tmpfs mounts are Linux's") }

func unmount(string) error { return nil }
