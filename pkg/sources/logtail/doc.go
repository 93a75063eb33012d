// Package logtail is the "logtail" source: it follows a log file that a
// process writes, such as llama-server's --log-file, and emits its lines.
// `collector attach --pid PID --log FILE` runs one per attached process.
//
// # Lifecycle
//
// Run polls the file every PollInterval (no inotify). It waits for the file
// when it does not exist yet. Run returns nil when ctx is cancelled, and
// when Config.Done closes (the writer exited): it then reads the file to its
// end, emits a last line without newline if FlushPartialOnDone is set, and
// waits up to AckWait for the downstream to acknowledge what it emitted.
// Run may be called again after it returned, never concurrently; it then
// starts from the checkpoint.
//
// # Lines
//
// A line ends at '\n', which is not part of Text; a '\r' before it is kept
// (the parser strips it). A partial last line is held until its newline
// arrives. Lines longer than MaxLineBytes (sources.MaxLineBytes by default)
// are cut into pieces of that size, each a line of its own. NUL bytes
// are dropped from Text (see Rotation); a line of NULs only is skipped.
// Consecutive lines are emitted as one sources.Record{Lines: ...} of up to
// Settings.Batch.MaxLines lines, at the latest Settings.Batch.MaxDelay after
// its first line was read. Every line has Stream (default "log"), Time (when it was read) and
// Seq, numbered from FirstSeq (default 1) and continued across restarts and
// rotations.
//
// # Checkpointing
//
// Each record carries an Ack. The position after a record's last line
// (device and inode of the file, offset, next Seq, and the SHA-256 of the
// file's first min(1024, offset) bytes) is written to the state file only
// when that record and every record before it were acknowledged; records
// acknowledged out of order wait for the earlier ones. The state file is
// StateDir/logtail-<hash of run id and absolute path>.json, written to a
// temporary file, synced and renamed over the old one. Run also persists
// the acknowledged position when it returns. So a collector killed at any
// point and restarted emits again exactly the lines after the last persisted
// position, with the same Seq numbers, and none before it; lines acked but
// not yet persisted when it was killed are emitted again (at-least-once;
// the event ids derived from Seq make them duplicates downstream).
//
// On start with a checkpoint:
//
//  1. If Path is still the checkpointed file (same device and inode, at
//     least offset bytes long, same first bytes), reading resumes at the
//     offset.
//  2. Otherwise the file was rotated while the collector was away. The
//     directory of Path is searched for a regular file whose name begins
//     with Path's name (FILE.1, FILE-20250101, ...): first one with the
//     checkpointed device and inode, else (a copy left by copytruncate) the
//     first by name whose first bytes hash the same. That file is read from
//     the offset to its end, then Path from offset 0.
//  3. If no such file is found (it was deleted, compressed or moved
//     elsewhere), Path is read from offset 0; the lines left in the old file
//     after the checkpoint are lost, which is logged at Warn level.
//
// With OnlyCheckpointedFile (the writer is known to be gone, and never
// reopened its log), only the checkpointed file is read: case 3 reads
// nothing, and a new file at Path is not followed after the rotated one
// (it is another writer's); the checkpointed file truncated in place is
// still read from its start (copytruncate, or another writer opening the
// same path: not told apart).
//
// Seq always continues from the checkpoint. An unreadable or foreign state
// file is logged and ignored (the log is read from the start, numbered from
// FirstSeq). Without StateDir nothing is persisted.
//
// # Rotation
//
// Every poll compares the file that Path names with the open file.
//
//   - Rename (logrotate's default): when Path names another file, the open
//     file (under whatever name it now has) is read to its end, a partial
//     last line of it is emitted as a line, and reading continues at offset
//     0 of the new file. While Path does not exist, the old file is still
//     read. Writes to the old file after this switch are not read.
//   - Copytruncate, or any rewrite in place: when the open file is shorter
//     than the offset read so far, or its first bytes changed, a partial
//     line is emitted as it is and reading continues at offset 0. A writer
//     that does not open the file with O_APPEND keeps writing at its old
//     offset and leaves a hole of NUL bytes before its next line; those
//     NULs are dropped.
//
// Limits: a file that is created and renamed away again between two polls
// is never seen (as with tail -F). A truncation is invisible when the file regrows past our offset
// with the same first bytes before the next poll; then the regrown part
// before our offset is not read. Several rotations while the collector was
// away lose the files between the checkpointed one and the current Path.
package logtail
