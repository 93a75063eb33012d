// Package fdinfo samples the DRM file descriptors of a process tree: the
// verbatim text of /proc/<pid>/fdinfo/<fd> for every DRM fd of the root
// process and its descendants, and the device-wide GTT counters of amdgpu
// cards from sysfs. It does not interpret the texts; the fold does.
//
// # Lifecycle
//
// Run resolves the root PID (Process.PID, or Process.PIDFunc, which may block
// until a wrapped child started), then emits one Record{Sample} per
// Config.Interval, the first at once. Sample.Seq counts from 1. Run
// returns nil when ctx is cancelled or when the root process is gone (its
// /proc entry disappeared, it became a zombie, or its start time changed,
// which means the PID was reused); it emits nothing after that.
//
// Source.SampleNow takes a sample at once in its caller's goroutine (the
// collector's log reader, at a memory-relevant line), which Run emits in
// order with its ticks; Sample.Seq counts every sample.
//
// # Sampling
//
// The expensive work happens at most once per Config.RescanInterval: finding
// the tree (the task/*/children files, or a scan of every <proc>/*/stat when
// the kernel has no children files) and finding the DRM fds of each process
// (readlink of <proc>/<pid>/fd/*, keeping targets under /dev/dri/). On every
// tick only the fdinfo files of those fds are read, each kept open and
// re-read with one pread at offset 0 into a reused buffer (procfs generates
// the text anew on every read from offset 0). A read error, or a
// drm-client-id that differs from the previous read of the same fd (the fd
// was closed and reused), rescans that process at once.
//
// A process is identified by its PID and its start time (field 22 of
// <proc>/<pid>/stat), so a reused PID is a new process. When <proc>/<pid>/fd
// cannot be listed (a captured fixture tree has no fd links), the sampler
// reads every fdinfo file of that process at rescan time and keeps those that
// contain "drm-driver:" (or, amdgpu before kernel 5.19, "gtt mem:");
// FDInfo.Link is empty then.
//
// Cards are the <sys>/class/drm/card<N> entries whose device/driver link
// names amdgpu, or that have no driver link but do have
// device/mem_info_gtt_used and device/mem_info_gtt_total. A missing sysfs
// means no cards.
//
// # Errors
//
// A root PID that does not exist when Run starts is an error matching
// ErrNoProcess. Read errors of single files are not: the file is dropped
// from that tick and found again at the next rescan.
package fdinfo
