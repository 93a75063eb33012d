// Package procwrap runs one command as a child process (`collector run --
// CMD ARGS...`), passes its output through unchanged and reports its
// lifecycle and its log lines as records.
//
// # Lifecycle
//
// New prepares the command line and the environment; Run starts the child,
// emits one Record{Started} first, then Record{Lines} batches, and one
// Record{Finished} last, after the child exited and every captured line was
// emitted. Run returns when the child has exited and its output is drained.
// Run may be called once per Source.
//
// The child inherits the collector's stdin and process group, so a terminal
// delivers Ctrl-C to both. Signal forwards a signal the collector received;
// WaitPID and PID tell other sources (the fdinfo sampler) which process to
// follow as soon as it started; ExitCode is the child's exit status (128+N
// after death by signal N, 127 when it could not be started) once Run
// returned.
//
// Cancelling the context of Run stops the child: it is sent SIGTERM, and
// SIGKILL after Config.KillGrace. Run then still emits the remaining lines
// and the Finished record under a fresh deadline of Options.DrainTimeout.
//
// # Output
//
// Both streams reach Options.Stdout and Options.Stderr byte for byte, in the
// chunks the child wrote. Each complete line is also captured: its text
// without the trailing "\n" (a "\r" is kept), its stream ("stdout" or
// "stderr"), its capture time and a sequence number from one counter shared
// by both streams, starting at 1, in capture order. A last line without a
// newline is captured when the child exits. A line longer than
// Options.MaxLineBytes (sources.MaxLineBytes by default) is captured in
// pieces of that size, each a line of its own.
//
// Capture never slows the child down: captured lines wait in a buffer of
// Options.BufferBytes, and when the downstream is slower than the child the
// lines that do not fit are counted (Dropped) instead of blocking the
// passthrough. A dropped line still consumes its sequence number, so the gap
// shows where lines are missing. Each Record{Lines} holds lines of one
// stream only.
//
// # Errors
//
// A command that cannot be started (not found, not executable) makes Run
// return a *StartError, which matches ErrCannotRun with errors.Is; nothing is
// emitted then and ExitCode is 127. A downstream that refuses a record while
// the context is live makes Run stop capturing, wait for the child and
// return that error; the child is not disturbed.
package procwrap
