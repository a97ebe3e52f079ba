// Package cpuquota confines lab processes to a fixed share of a CPU with
// Linux control groups, so that sixteen node processes fit in two cores and
// each is CPU-bound the way the papers' machines were (issue 33). It checks
// what it promises: a process's measured CPU never exceeds its quota by more
// than the tolerance, and a run in which the machine could not give every
// process its quota is judged starved, not measured.
//
// It drives the cpu controller of cgroup v1 (cpu.cfs_quota_us) or v2
// (cpu.max), whichever the machine mounts, and needs root. The product
// never imports it.
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

// Root is a directory of groups made for one run, removed by Close.
type Root struct {
	dir string
	v2  bool
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
	dir   string
	cores float64
}

// Group makes a child group limited to cores CPUs (0.1 is a tenth of one).
func (r *Root) Group(name string, cores float64) (*Group, error) {
	if cores <= 0 || cores > 1024 {
		return nil, fmt.Errorf("cpuquota: cores must be in (0, 1024], got %v", cores)
	}
	dir := filepath.Join(r.dir, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cpuquota: %w", err)
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
		os.Remove(dir)
		return nil, fmt.Errorf("cpuquota: set the quota of %s: %w", dir, err)
	}
	return &Group{dir: dir, cores: cores}, nil
}

// Cores is the group's quota.
func (g *Group) Cores() float64 { return g.cores }

// Add moves process pid (all its threads) into the group.
func (g *Group) Add(pid int) error {
	if err := os.WriteFile(filepath.Join(g.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return fmt.Errorf("cpuquota: add process %d to %s: %w", pid, g.dir, err)
	}
	return nil
}

// Close removes the groups; processes still in them go back to the
// machine's root group first.
func (r *Root) Close() error {
	parent := filepath.Dir(r.dir)
	subs, _ := os.ReadDir(r.dir)
	var errs []error
	for _, s := range subs {
		if !s.IsDir() {
			continue
		}
		dir := filepath.Join(r.dir, s.Name())
		if b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
			for _, pid := range strings.Fields(string(b)) {
				os.WriteFile(filepath.Join(parent, "cgroup.procs"), []byte(pid), 0o644)
			}
		}
		if err := os.Remove(dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.Remove(r.dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
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
