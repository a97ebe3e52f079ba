// Package cpuquota confines lab processes to a fixed share of a CPU with
// Linux control groups, so that sixteen node processes fit in two cores and
// each is CPU-bound the way the papers' machines were (issue 33). It checks
// what it promises: a process's measured CPU never exceeds its quota by more
// than the tolerance, and a run in which the machine could not give every
// process its quota is judged starved, not measured.
//
// It drives the cpu controller of cgroup v1 (cpu.cfs_quota_us) or v2
// (cpu.max), whichever the machine mounts, and needs root. A group may
// also have a memory limit (v1's memory.limit_in_bytes, v2's memory.max):
// the page cache a process fills is charged to its group, so a limit
// bounds the cache one process keeps without touching the machine's (the
// gage bench's Fig 4). The product never imports it.
package cpuquota

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// period is the CFS period a group uses: 10 ms, so that a node that used
// up its quota waits at most 10 ms × (1 − cores) for its next turn. At the
// kernel's default of 100 ms a 0.3-core node paused up to 70 ms at a
// time, and a level-2 write, which waits for every replica's append,
// waited for the slowest replica's pause: the nodes measured the
// throttling, not their capacity. A quota below minQuota per period gets
// a longer period instead.
const period = 10 * time.Millisecond

// minQuota is the least run time per period a group gets (the kernel
// refuses less than 1 ms).
const minQuota = time.Millisecond

// ErrUnavailable says the machine cannot confine processes here (no cpu
// controller mounted, or not root); a test skips or, under CI, fails on it.
var ErrUnavailable = errors.New("cpuquota: no writable cgroup cpu controller")

// ErrNoMemory says a group cannot have a memory limit here: no writable
// cgroup v1 memory hierarchy, or cgroup v2's memory controller not
// available to the root's children.
var ErrNoMemory = errors.New("cpuquota: no writable cgroup memory controller")

// v1Memory is cgroup v1's memory hierarchy, mounted apart from cpu's.
const v1Memory = "/sys/fs/cgroup/memory"

// Root is a directory of groups made for one run, removed by Close.
type Root struct {
	dir string
	v2  bool
	// mem is the parent group of memory-limited groups, made by the
	// first: v1's directory under its memory hierarchy, v2's dir once
	// the memory controller is enabled in it; "" until then.
	mem string
}

// Open makes a fresh parent group named name under the machine's cpu
// controller (cgroup v1's /sys/fs/cgroup/cpu, else cgroup v2's root with
// the cpu controller enabled for children).
func Open(name string) (*Root, error) {
	if v1 := "/sys/fs/cgroup/cpu"; writable(filepath.Join(v1, "cpu.cfs_quota_us")) {
		return mk(filepath.Join(v1, name), false)
	}
	for _, v2 := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		ctl, err := os.ReadFile(filepath.Join(v2, "cgroup.controllers"))
		if err != nil || !strings.Contains(" "+string(ctl)+" ", " cpu ") {
			continue
		}
		r, err := mk(filepath.Join(v2, name), true)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(r.dir, "cgroup.subtree_control"), []byte("+cpu"), 0o644); err != nil {
			r.Close()
			return nil, fmt.Errorf("%w: enable cpu in %s: %v", ErrUnavailable, r.dir, err)
		}
		return r, nil
	}
	return nil, ErrUnavailable
}

func writable(path string) bool {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

func mk(dir string, v2 bool) (*Root, error) {
	os.Remove(dir) // a leftover of an earlier run, if empty
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return &Root{dir: dir, v2: v2}, nil
}

// Group is one confined set of processes.
type Group struct {
	// dirs are the group's directories: the cpu controller's, and v1's
	// memory hierarchy's if it has a memory limit.
	dirs  []string
	cores float64
}

// Group makes a child group limited to cores CPUs (0.1 is a tenth of one)
// and, if memory > 0, to that many bytes of memory, page cache included.
func (r *Root) Group(name string, cores float64, memory int64) (*Group, error) {
	if cores <= 0 || cores > 1024 {
		return nil, fmt.Errorf("cpuquota: cores must be in (0, 1024], got %v", cores)
	}
	if memory < 0 {
		return nil, fmt.Errorf("cpuquota: memory must be >= 0 bytes, got %d", memory)
	}
	if memory > 0 {
		if err := r.openMemory(); err != nil {
			return nil, err
		}
	}
	dir := filepath.Join(r.dir, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cpuquota: %w", err)
	}
	g := &Group{dirs: []string{dir}, cores: cores}
	if err := r.limitMemory(g, name, memory); err != nil {
		g.remove()
		return nil, err
	}
	us := int64(period / time.Microsecond)
	quota := int64(cores * float64(us))
	if min := int64(minQuota / time.Microsecond); quota < min {
		quota, us = min, int64(float64(min)/cores)
	}
	var err error
	if r.v2 {
		err = os.WriteFile(filepath.Join(dir, "cpu.max"), fmt.Appendf(nil, "%d %d", quota, us), 0o644)
	} else if err = os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), fmt.Appendf(nil, "%d", us), 0o644); err == nil {
		err = os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), fmt.Appendf(nil, "%d", quota), 0o644)
	}
	if err != nil {
		g.remove()
		return nil, fmt.Errorf("cpuquota: set the quota of %s: %w", dir, err)
	}
	return g, nil
}

// openMemory makes r.mem, once: v1's parent group under the memory
// hierarchy, or v2's memory controller enabled for r's children.
func (r *Root) openMemory() error {
	switch {
	case r.mem != "":
		return nil
	case r.v2:
		if err := os.WriteFile(filepath.Join(r.dir, "cgroup.subtree_control"), []byte("+memory"), 0o644); err != nil {
			return fmt.Errorf("%w: enable memory in %s (is it in %s/cgroup.subtree_control?): %v", ErrNoMemory, r.dir, filepath.Dir(r.dir), err)
		}
		r.mem = r.dir
	default:
		if !writable(filepath.Join(v1Memory, "memory.limit_in_bytes")) {
			return fmt.Errorf("%w: no %s hierarchy", ErrNoMemory, v1Memory)
		}
		dir := filepath.Join(v1Memory, filepath.Base(r.dir))
		os.Remove(dir) // a leftover of an earlier run, if empty
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fmt.Errorf("%w: %v", ErrNoMemory, err)
		}
		r.mem = dir
	}
	return nil
}

// limitMemory sets g's memory limit, if memory > 0: in v2 in its own
// directory, in v1 in a directory of the memory hierarchy added to g's.
func (r *Root) limitMemory(g *Group, name string, memory int64) error {
	if memory == 0 {
		return nil
	}
	file := "memory.max"
	if !r.v2 {
		dir := filepath.Join(r.mem, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fmt.Errorf("cpuquota: %w", err)
		}
		g.dirs, file = append(g.dirs, dir), "memory.limit_in_bytes"
	}
	dir := g.dirs[len(g.dirs)-1]
	if err := os.WriteFile(filepath.Join(dir, file), strconv.AppendInt(nil, memory, 10), 0o644); err != nil {
		return fmt.Errorf("cpuquota: set the memory limit of %s: %w", dir, err)
	}
	return nil
}

// remove removes a group that has no processes yet.
func (g *Group) remove() {
	for _, d := range g.dirs {
		os.Remove(d)
	}
}

// Cores is the group's quota.
func (g *Group) Cores() float64 { return g.cores }

// Add moves process pid (all its threads) into the group.
func (g *Group) Add(pid int) error {
	for _, d := range g.dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("cpuquota: add process %d to %s: %w", pid, d, err)
		}
	}
	return nil
}

// Close removes the groups; processes still in them go back to the
// machine's root group first.
func (r *Root) Close() error {
	errs := []error{closeDir(r.dir)}
	if r.mem != "" && r.mem != r.dir {
		errs = append(errs, closeDir(r.mem))
	}
	return errors.Join(errs...)
}

// closeDir removes a parent group and its children, moving the children's
// processes to the parent's parent first.
func closeDir(root string) error {
	parent := filepath.Dir(root)
	subs, _ := os.ReadDir(root)
	var errs []error
	for _, s := range subs {
		if !s.IsDir() {
			continue
		}
		dir := filepath.Join(root, s.Name())
		if b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
			for _, pid := range strings.Fields(string(b)) {
				os.WriteFile(filepath.Join(parent, "cgroup.procs"), []byte(pid), 0o644)
			}
		}
		if err := os.Remove(dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.Remove(root); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ReadBytes is how many bytes process pid has had read from storage for
// it so far (read_bytes of /proc/PID/io): reads the page cache served
// count none, so the growth over a window is what missed it.
func ReadBytes(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "read_bytes:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("cpuquota: /proc/%d/io: %w", pid, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("cpuquota: /proc/%d/io: no read_bytes", pid)
}

// ProcessCPU is the CPU time process pid has used so far (user and
// system, all threads), from /proc/PID/stat.
func ProcessCPU(pid int) (time.Duration, error) {
	st, err := ReadStat(pid)
	return st.CPU, err
}

// Stat is what /proc/PID/stat says of a process's parent and CPU time.
type Stat struct {
	PPID int
	// CPU is the process's own (utime + stime, all threads); Reaped is
	// its reaped children's (cutime + cstime).
	CPU, Reaped time.Duration
}

// ReadStat parses /proc/PID/stat.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Stat{}, err
	}
	// The command name (field 2) may hold spaces and parentheses: fields
	// count from the last ')'. Then: state ppid ... utime(14) stime cutime
	// cstime.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return Stat{}, fmt.Errorf("cpuquota: /proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 15 {
		return Stat{}, fmt.Errorf("cpuquota: /proc/%d/stat: %d fields", pid, len(f))
	}
	var v [5]int64
	for j, k := range [5]int{1, 11, 12, 13, 14} {
		if v[j], err = strconv.ParseInt(f[k], 10, 64); err != nil {
			return Stat{}, fmt.Errorf("cpuquota: /proc/%d/stat: %w", pid, err)
		}
	}
	tick := time.Second / clockTicks
	return Stat{PPID: int(v[0]), CPU: time.Duration(v[1]+v[2]) * tick, Reaped: time.Duration(v[3]+v[4]) * tick}, nil
}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

// MachineIdle is the idle CPU time of the whole machine so far, summed
// over cores, from /proc/stat (idle and iowait).
func MachineIdle() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, fmt.Errorf("cpuquota: /proc/stat: unexpected first line %q", line)
	}
	idle, err1 := strconv.ParseInt(f[4], 10, 64)
	iowait, err2 := strconv.ParseInt(f[5], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("cpuquota: /proc/stat: %w", err)
	}
	return time.Duration(idle+iowait) * time.Second / clockTicks, nil
}
