package split

import (
	"path"
	"strconv"
	"strings"
)

// Figures are what one split says of its lane over time: the model file it
// measured, the llama.cpp build and commit (and the commit's time, when
// the collector read it), when it ran, the tracker issue it names, and the figures
// of its rows that are kept (a field per row of Rows whose Kept is true).
// The run index keeps them for every closed run, so the lane gauges,
// `aggregator history` and the trend page read them without the runs'
// states. Pointer fields are nil when the split does not know them
// (and are left out of the JSON).
type Figures struct {
	Model  string `json:"model,omitempty"`
	Build  string `json:"llama_build,omitempty"`
	Commit string `json:"source_commit,omitempty"`
	Dirty  *bool  `json:"source_dirty,omitempty"`
	// CommitTime is the measured commit's committer time (RFC 3339), ""
	// when unknown: it orders two builds of one number.
	CommitTime string `json:"source_commit_time,omitempty"`
	Started    string `json:"started,omitempty"`
	// Issue is the tracker issue the run names (OWNER/REPO#N), if any.
	Issue     string `json:"issue,omitempty"`
	ControlOf string `json:"control_of,omitempty"`
	Complete  bool   `json:"complete,omitempty"`

	PeakGTTMiB      *MiB `json:"peak_gtt_mib,omitempty"`
	FinalGTTMiB     *MiB `json:"final_gtt_mib,omitempty"`
	ModelGTTMiB     *MiB `json:"model_gtt_mib,omitempty"`
	PackedMiB       *MiB `json:"packed_mib,omitempty"`
	StateMiB        *MiB `json:"state_mib,omitempty"`
	ComputeMiB      *MiB `json:"compute_mib,omitempty"`
	UnattributedMiB *MiB `json:"unattributed_mib,omitempty"`
	UnattributedPct *Pct `json:"unattributed_pct,omitempty"`
	DuplicatePct    *Pct `json:"duplicate_pct,omitempty"`
}

// FiguresOf returns r's figures: its provenance, and the figure of every
// row Figures keep (Rows). The commit is the measured tree's (provenance)
// or else the one the build line names.
func FiguresOf(r Report) Figures {
	commit := r.Provenance.SourceCommit
	if commit == "" {
		commit = BuildCommit(r.Provenance.LlamaBuild)
	}
	f := Figures{
		Model: ModelName(r), Build: r.Provenance.LlamaBuild, Commit: commit, Dirty: r.Provenance.SourceDirty,
		CommitTime: r.Provenance.SourceCommitTime, Started: r.Run.Started, Issue: r.Run.Issue,
		ControlOf: r.Run.ControlOf, Complete: r.Run.Complete,
	}
	for _, row := range Rows {
		if row.figures != nil {
			*row.figures(&f) = row.Of(r)
		}
	}
	return f
}

// ModelName is the model file a run measured: its main load's file, else
// the command's -m/--model argument, as a base name ("" when neither says).
func ModelName(r Report) string {
	for _, m := range r.Models {
		if m.File != "" && (m.Role == "main" || m.Role == "model") {
			return path.Base(m.File)
		}
	}
	f := strings.Fields(r.Run.Command)
	for i, a := range f {
		switch {
		case (a == "-m" || a == "--model") && i+1 < len(f):
			return path.Base(f[i+1])
		case strings.HasPrefix(a, "--model="):
			return path.Base(strings.TrimPrefix(a, "--model="))
		}
	}
	return ""
}

// BuildNumber is the llama.cpp build number of a provenance's build text
// ("b9866 (40f58efe1)" is 9866); false when the text names none.
func BuildNumber(build string) (int64, bool) {
	if len(build) < 2 || build[0] != 'b' {
		return 0, false
	}
	end := 1
	for end < len(build) && build[end] >= '0' && build[end] <= '9' {
		end++
	}
	n, err := strconv.ParseInt(build[1:end], 10, 64)
	if err != nil || (end < len(build) && build[end] != ' ') {
		return 0, false
	}
	return n, true
}

// BuildCommit is the commit a provenance's build text names
// ("b9866 (40f58efe1)" names 40f58efe1), or "".
func BuildCommit(build string) string {
	i := strings.IndexByte(build, '(')
	if i < 0 {
		return ""
	}
	s := build[i+1:]
	if j := strings.IndexAny(s, ",)"); j >= 0 {
		s = s[:j]
	}
	return strings.TrimSpace(s)
}
