package bench

import (
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/neptune-cluster/neptune/lab/cpuquota"
)

// clockTicks is the unit of /proc's CPU times (USER_HZ, 100 on every
// Linux architecture Go supports).
const clockTicks = 100

// cpuSample is the machine's busy and stolen CPU time and this process
// tree's CPU time, all in clock ticks, read at one instant.
type cpuSample struct {
	busy, steal, tree int64
	ok                bool
}

// sampleCPU reads a cpuSample; ok is false off Linux or if /proc cannot
// be read.
func sampleCPU() cpuSample {
	busy, steal, ok := machineTicks()
	if !ok {
		return cpuSample{}
	}
	tree, ok := treeTicks(os.Getpid())
	return cpuSample{busy: busy, steal: steal, tree: tree, ok: ok}
}

// otherCores is the CPU, in cores, spent between a and b on work outside
// the process tree: the machine's busy time not used by the tree, plus
// steal. Accounting skew between /proc/stat and the processes' own times
// can make the busy part slightly negative; it is clamped at 0.
func otherCores(a, b cpuSample, elapsed time.Duration) float64 {
	outside := max((b.busy-a.busy)-(b.tree-a.tree), 0) + (b.steal - a.steal)
	return float64(outside) / clockTicks / elapsed.Seconds()
}

// machineTicks is the busy (user + nice + system) and steal time of all
// CPUs from /proc/stat's first line. Interrupt time is left out: it is
// charged to no process, so it can be told neither ours nor others'.
func machineTicks() (busy, steal int64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, false
	}
	var v [8]int64
	for i := range v {
		if v[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
			return 0, 0, false
		}
	}
	// user nice system idle iowait irq softirq steal
	return v[0] + v[1] + v[2], v[7], true
}

// procTimes is one process's parent and CPU time in clock ticks: its own
// (utime + stime) and its reaped children's (cutime + cstime).
type procTimes struct {
	ppid int
	cpu  int64
}

// readProc reads pid's parent and CPU time.
func readProc(pid int) (procTimes, bool) {
	st, err := cpuquota.ReadStat(pid)
	if err != nil {
		return procTimes{}, false
	}
	return procTimes{ppid: st.PPID, cpu: int64((st.CPU + st.Reaped) / (time.Second / clockTicks))}, true
}

// treeTicks is the CPU time of root and all its live descendants, each
// with its reaped children's: so a child that exits between two samples
// moves from its own count to its parent's and is never lost. A
// descendant that outlives its parent is re-parented away and counts as
// other work from then on, which errs towards doubt.
func treeTicks(root int) (int64, bool) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, false
	}
	procs := map[int]procTimes{}
	children := map[int][]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProc(pid); ok {
			procs[pid] = p
			children[p.ppid] = append(children[p.ppid], pid)
		}
	}
	if _, ok := procs[root]; !ok {
		return 0, false
	}
	var total int64
	stack := []int{root}
	for len(stack) > 0 {
		pid := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		total += procs[pid].cpu
		stack = append(stack, children[pid]...)
	}
	return total, true
}

// TreeCPU is the CPU time this process and its descendants have used,
// reaped ones included: what a benchmark's own processes cost, whatever
// else the machine runs. ok is false off Linux.
func TreeCPU() (time.Duration, bool) {
	t, ok := treeTicks(os.Getpid())
	return time.Duration(t) * time.Second / clockTicks, ok
}
