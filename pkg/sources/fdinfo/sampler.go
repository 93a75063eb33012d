package fdinfo

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

const (
	drmPrefix = "/dev/dri/"
	// maxFileBytes bounds one fdinfo or stat text; larger ones are errors.
	maxFileBytes = 1 << 20
)

var (
	keyDriver   = []byte("drm-driver:")
	keyOldGTT   = []byte("gtt mem:") // amdgpu before kernel 5.19: no drm- keys
	keyClientID = []byte("drm-client-id:")
	cardName    = regexp.MustCompile(`^card[0-9]+$`)
	errTooLarge = errors.New("file larger than 1 MiB")
	errEmpty    = errors.New("empty file")
)

// sampler is the state of one sampled tree. It is used by one goroutine.
type sampler struct {
	proc, sys string
	rescan    time.Duration
	readlink  func(string) (string, error)
	log       zerolog.Logger

	root      int
	rootStart uint64
	rootStat  *os.File

	procs  map[int]*procState
	treeAt time.Time // last tree and fd scan

	cards   []*cardState
	cardsAt time.Time

	buf      []byte // reused for every read
	seq      uint64
	readErrs uint64
}

type procState struct {
	pid   int
	start uint64
	links bool // DRM fds were found through fd/ links, not by content
	fds   []*fdState
}

type fdState struct {
	fd     int
	link   string
	f      *os.File
	client []byte // drm-client-id value of the last read
	known  bool   // client was read since the last scan
}

type cardState struct {
	name        string
	used, total *os.File
}

// newSampler opens the root process; a root that is not a live process is
// ErrNoProcess.
func newSampler(cfg Config, readlink func(string) (string, error), log zerolog.Logger, root int) (*sampler, error) {
	s := &sampler{
		proc:     cfg.ProcRoot,
		sys:      cfg.SysRoot,
		rescan:   cfg.RescanInterval,
		readlink: readlink,
		log:      log,
		root:     root,
		procs:    map[int]*procState{},
		buf:      make([]byte, 4096),
		seq:      1,
	}
	f, err := os.Open(s.path(root, "stat"))
	if err != nil {
		return nil, fmt.Errorf("%w: %d: %w", ErrNoProcess, root, err)
	}
	st, err := s.readStat(f)
	if err != nil || st.dead() {
		_ = f.Close()
		return nil, fmt.Errorf("%w: %d: not running", ErrNoProcess, root)
	}
	s.rootStat, s.rootStart = f, st.start
	return s, nil
}

func (s *sampler) path(pid int, elem ...string) string {
	return filepath.Join(append([]string{s.proc, strconv.Itoa(pid)}, elem...)...)
}

// close releases every open file.
func (s *sampler) close() {
	if s.rootStat != nil {
		_ = s.rootStat.Close()
		s.rootStat = nil
	}
	for pid, p := range s.procs {
		p.closeFDs()
		delete(s.procs, pid)
	}
	s.closeCards()
}

// sample takes one tick; nil means the root process is gone.
func (s *sampler) sample(now time.Time) *split.Sample {
	if !s.rootAlive() {
		return nil
	}
	full := s.treeAt.IsZero() || now.Sub(s.treeAt) >= s.rescan
	if full {
		s.scanTree()
		s.treeAt = now
	}
	smp := &split.Sample{Seq: s.seq, Time: now, Procs: make([]split.ProcFDs, 0, len(s.procs))}
	s.seq++
	for _, pid := range sortedKeys(s.procs) {
		p := s.procs[pid]
		alive := true
		if full {
			alive = s.scanFDs(p)
		}
		fds, ok := s.readFDs(p)
		if !ok && alive {
			alive = s.scanFDs(p)
			fds, _ = s.readFDs(p)
		}
		if !alive && pid != s.root {
			p.closeFDs()
			delete(s.procs, pid)
			continue
		}
		smp.Procs = append(smp.Procs, split.ProcFDs{PID: pid, FDs: fds})
	}
	if s.cardsAt.IsZero() || now.Sub(s.cardsAt) >= s.rescan {
		s.scanCards()
		s.cardsAt = now
	}
	smp.Cards = s.readCards()
	return smp
}

// rootAlive re-reads the root's stat through the open file, reopening it
// once on error.
func (s *sampler) rootAlive() bool {
	st, err := s.readStat(s.rootStat)
	if err != nil {
		_ = s.rootStat.Close()
		f, oerr := os.Open(s.path(s.root, "stat"))
		if oerr != nil {
			s.rootStat = nil
			return false
		}
		s.rootStat = f
		if st, err = s.readStat(f); err != nil {
			return false
		}
	}
	return !st.dead() && st.start == s.rootStart
}

func (s *sampler) readStat(f *os.File) (procStat, error) {
	if f == nil {
		return procStat{}, os.ErrClosed
	}
	n, err := s.pread(f)
	if err != nil {
		return procStat{}, err
	}
	return parseStat(s.buf[:n])
}

// pread reads the whole file into s.buf with one pread at offset 0, and
// retries with a larger buffer when it was filled.
func (s *sampler) pread(f *os.File) (int, error) {
	fd := int(f.Fd())
	for {
		n, err := unix.Pread(fd, s.buf, 0)
		if err != nil {
			return 0, err
		}
		if n == 0 {
			// procfs never has an empty stat or fdinfo, nor sysfs an
			// empty counter: treat it as the read error it stands for.
			return 0, errEmpty
		}
		if n < len(s.buf) {
			return n, nil
		}
		if len(s.buf) >= maxFileBytes {
			return 0, errTooLarge
		}
		s.buf = make([]byte, 2*len(s.buf))
	}
}

// readFile reads a file by name into s.buf (a fresh open each time).
func (s *sampler) readFile(name string) (int, error) {
	f, err := os.Open(name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return s.pread(f)
}

// scanTree finds the root's descendants and reconciles s.procs with them.
func (s *sampler) scanTree() {
	found := map[int]uint64{s.root: s.rootStart}
	if _, err := os.Stat(s.path(s.root, "task", strconv.Itoa(s.root), "children")); err == nil {
		s.treeByChildren(found)
	} else {
		s.treeByStat(found)
	}
	for pid, p := range s.procs {
		if start, ok := found[pid]; !ok || start != p.start {
			p.closeFDs()
			delete(s.procs, pid)
		}
	}
	for pid, start := range found {
		if _, ok := s.procs[pid]; !ok {
			s.procs[pid] = &procState{pid: pid, start: start}
		}
	}
}

// treeByChildren walks the task/*/children files from the root.
func (s *sampler) treeByChildren(found map[int]uint64) {
	queue := []int{s.root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		tasks, err := os.ReadDir(s.path(pid, "task"))
		if err != nil {
			continue // gone meanwhile
		}
		for _, t := range tasks {
			n, err := s.readFile(s.path(pid, "task", t.Name(), "children"))
			if err != nil {
				continue
			}
			for _, w := range bytes.Fields(s.buf[:n]) {
				child, err := atoi(w)
				if err != nil {
					continue
				}
				if _, seen := found[child]; seen {
					continue
				}
				if n, err := s.readFile(s.path(child, "stat")); err == nil {
					if st, err := parseStat(s.buf[:n]); err == nil && !st.dead() {
						found[child] = st.start
						queue = append(queue, child)
					}
				}
			}
		}
	}
}

// treeByStat reads the parent of every process and walks down from the
// root.
func (s *sampler) treeByStat(found map[int]uint64) {
	entries, err := os.ReadDir(s.proc)
	if err != nil {
		s.log.Debug().Err(err).Msg("cannot list processes")
		return
	}
	type node struct {
		pid   int
		start uint64
	}
	children := map[int][]node{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == s.root {
			continue
		}
		n, err := s.readFile(s.path(pid, "stat"))
		if err != nil {
			continue
		}
		st, err := parseStat(s.buf[:n])
		if err != nil || st.dead() {
			continue
		}
		children[st.ppid] = append(children[st.ppid], node{pid, st.start})
	}
	queue := []int{s.root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if _, seen := found[c.pid]; !seen {
				found[c.pid] = c.start
				queue = append(queue, c.pid)
			}
		}
	}
}

// exists reports whether p is still the process it was.
func (s *sampler) exists(p *procState) bool {
	n, err := s.readFile(s.path(p.pid, "stat"))
	if err != nil {
		return false
	}
	st, err := parseStat(s.buf[:n])
	return err == nil && !st.dead() && st.start == p.start
}

// scanFDs finds p's DRM fds and opens their fdinfo files: by fd/ links when
// they can be listed, else by reading every fdinfo file. It returns false
// when p is gone.
func (s *sampler) scanFDs(p *procState) bool {
	dir := s.path(p.pid, "fd")
	entries, err := os.ReadDir(dir)
	if err != nil {
		if !s.scanFDsByContent(p) {
			return s.exists(p)
		}
		return true
	}
	p.links = true
	old := p.fds
	p.fds = p.fds[:0:0]
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		link, err := s.readlink(filepath.Join(dir, e.Name()))
		if err != nil || !strings.HasPrefix(link, drmPrefix) {
			continue
		}
		if i := slices.IndexFunc(old, func(o *fdState) bool { return o != nil && o.fd == fd && o.link == link && o.f != nil }); i >= 0 {
			o := old[i]
			old[i] = nil
			o.known = false
			p.fds = append(p.fds, o)
			continue
		}
		f, err := os.Open(s.path(p.pid, "fdinfo", e.Name()))
		if err != nil {
			s.readErrs++
			continue
		}
		p.fds = append(p.fds, &fdState{fd: fd, link: link, f: f})
	}
	for _, o := range old {
		if o != nil {
			o.close()
		}
	}
	slices.SortFunc(p.fds, func(a, b *fdState) int { return a.fd - b.fd })
	return true
}

// scanFDsByContent keeps the fdinfo files that name a DRM driver; it
// returns false when the fdinfo directory cannot be listed.
func (s *sampler) scanFDsByContent(p *procState) bool {
	p.closeFDs()
	p.links = false
	dir := s.path(p.pid, "fdinfo")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		n, err := s.pread(f)
		if err != nil || !isDRM(s.buf[:n]) {
			_ = f.Close()
			continue
		}
		p.fds = append(p.fds, &fdState{fd: fd, f: f})
	}
	slices.SortFunc(p.fds, func(a, b *fdState) int { return a.fd - b.fd })
	return true
}

// readFDs re-reads p's known DRM fds. ok is false when one failed or no
// longer names the client it named before: p needs a rescan.
func (s *sampler) readFDs(p *procState) (fds []split.FDInfo, ok bool) {
	ok = true
	fds = make([]split.FDInfo, 0, len(p.fds))
	for _, fs := range p.fds {
		if fs.f == nil {
			ok = false
			continue
		}
		n, err := s.pread(fs.f)
		if err != nil {
			s.readErrs++
			fs.close()
			ok = false
			continue
		}
		text := s.buf[:n]
		if !p.links && !isDRM(text) {
			ok = false
			continue
		}
		id := value(text, keyClientID)
		if fs.known && !bytes.Equal(id, fs.client) {
			ok = false
		}
		fs.client = append(fs.client[:0], id...)
		fs.known = true
		fds = append(fds, split.FDInfo{FD: fs.fd, Link: fs.link, Text: string(text)})
	}
	return fds, ok
}

// scanCards finds the amdgpu cards and opens their GTT counters.
func (s *sampler) scanCards() {
	s.closeCards()
	if s.sys == "" {
		return
	}
	dir := filepath.Join(s.sys, "class", "drm")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !cardName.MatchString(e.Name()) {
			continue
		}
		dev := filepath.Join(dir, e.Name(), "device")
		if link, err := s.readlink(filepath.Join(dev, "driver")); err == nil && filepath.Base(link) != "amdgpu" {
			continue
		}
		used, err := os.Open(filepath.Join(dev, "mem_info_gtt_used"))
		if err != nil {
			continue
		}
		total, err := os.Open(filepath.Join(dev, "mem_info_gtt_total"))
		if err != nil {
			_ = used.Close()
			continue
		}
		s.cards = append(s.cards, &cardState{name: e.Name(), used: used, total: total})
	}
}

func (s *sampler) readCards() []split.CardGTT {
	var out []split.CardGTT
	for _, c := range s.cards {
		used, err1 := s.readInt(c.used)
		total, err2 := s.readInt(c.total)
		if err := errors.Join(err1, err2); err != nil {
			s.readErrs++
			s.log.Debug().Err(err).Str("card", c.name).Msg("cannot read gtt counters")
			s.cardsAt = time.Time{} // rescan next tick
			continue
		}
		out = append(out, split.CardGTT{Card: c.name, UsedBytes: used, TotalBytes: total})
	}
	return out
}

func (s *sampler) readInt(f *os.File) (int64, error) {
	n, err := s.pread(f)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(bytes.TrimSpace(s.buf[:n])), 10, 64)
}

func (s *sampler) closeCards() {
	for _, c := range s.cards {
		_ = c.used.Close()
		_ = c.total.Close()
	}
	s.cards = nil
}

func (p *procState) closeFDs() {
	for _, fs := range p.fds {
		fs.close()
	}
	p.fds = nil
}

func (fs *fdState) close() {
	if fs.f != nil {
		_ = fs.f.Close()
		fs.f = nil
	}
}

// hasKey reports whether text has a line starting with key.
// isDRM reports whether an fdinfo text is a DRM client's: a drm-driver
// key, or the pre-5.19 amdgpu "gtt mem" key.
func isDRM(text []byte) bool { return hasKey(text, keyDriver) || hasKey(text, keyOldGTT) }

func hasKey(text, key []byte) bool {
	return lineStart(text, key) >= 0
}

// value returns the trimmed value of the first line starting with key.
func value(text, key []byte) []byte {
	i := lineStart(text, key)
	if i < 0 {
		return nil
	}
	v := text[i+len(key):]
	if j := bytes.IndexByte(v, '\n'); j >= 0 {
		v = v[:j]
	}
	return bytes.TrimSpace(v)
}

// lineStart returns the offset of the first line of text that starts with
// key, or -1.
func lineStart(text, key []byte) int {
	off := 0
	for {
		i := bytes.Index(text[off:], key)
		if i < 0 {
			return -1
		}
		if off+i == 0 || text[off+i-1] == '\n' {
			return off + i
		}
		off += i + 1
	}
}

func sortedKeys[V any](m map[int]V) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
