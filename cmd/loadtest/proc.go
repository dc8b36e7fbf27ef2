package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// cpuTicks parses the contents of /proc/<pid>/stat and returns utime+stime,
// the CPU time of all the process's threads (dead ones included), in clock
// ticks (USER_HZ). The second field, comm, is in parentheses and may itself
// contain spaces and parentheses, so the fields are counted from the last ')'.
func cpuTicks(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc stat: no ')' in %q", truncate(stat, 64))
	}
	// After ") " come field 3 (state) onwards; utime is field 14, stime 15.
	f := strings.Fields(string(stat[i+1:]))
	const utime, stime = 14 - 3, 15 - 3
	if len(f) <= stime {
		return 0, fmt.Errorf("malformed /proc stat: %d fields after comm, want > %d", len(f), stime)
	}
	u, err := strconv.ParseUint(f[utime], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("malformed /proc stat utime %q: %w", f[utime], err)
	}
	s, err := strconv.ParseUint(f[stime], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("malformed /proc stat stime %q: %w", f[stime], err)
	}
	return u + s, nil
}

// memStatus holds the memory lines of /proc/<pid>/status, in bytes.
type memStatus struct {
	RSS uint64 // VmRSS: resident set size now
	HWM uint64 // VmHWM: peak resident set size ("high water mark")
}

// parseStatus parses the VmRSS and VmHWM lines ("VmHWM:\t   12345 kB") of
// /proc/<pid>/status. Both must be present (they are absent for zombies and
// kernel threads).
func parseStatus(status []byte) (memStatus, error) {
	var m memStatus
	var seen int
	for _, line := range strings.Split(string(status), "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		f := strings.Fields(val)
		if len(f) != 2 || f[1] != "kB" {
			return m, fmt.Errorf("malformed /proc status line %q", line)
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return m, fmt.Errorf("malformed /proc status line %q: %w", line, err)
		}
		if key == "VmRSS" {
			m.RSS = kb << 10
		} else {
			m.HWM = kb << 10
		}
		seen++
	}
	if seen != 2 {
		return m, fmt.Errorf("/proc status has no VmRSS/VmHWM lines (process exited?)")
	}
	return m, nil
}

// hostCPU is the machine-wide line "cpu ..." of /proc/stat, in clock ticks.
type hostCPU struct {
	Busy  uint64 // user+nice+system+irq+softirq+steal
	Total uint64 // Busy + idle + iowait
}

// parseHostStat parses the aggregate "cpu" line of /proc/stat:
// cpu user nice system idle iowait irq softirq steal guest guest_nice.
// guest and guest_nice are already included in user and nice.
func parseHostStat(stat []byte) (hostCPU, error) {
	line, _, _ := bytes.Cut(stat, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		return hostCPU{}, fmt.Errorf("malformed /proc/stat first line %q", truncate(line, 80))
	}
	var v [8]uint64
	for i := 0; i < len(v) && i+1 < len(f); i++ {
		n, err := strconv.ParseUint(f[i+1], 10, 64)
		if err != nil {
			return hostCPU{}, fmt.Errorf("malformed /proc/stat field %q: %w", f[i+1], err)
		}
		v[i] = n
	}
	idle := v[3] + v[4]
	busy := v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
	return hostCPU{Busy: busy, Total: busy + idle}, nil
}

func readCPUTicks(pid string) (uint64, error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, err
	}
	return cpuTicks(b)
}

func readStatus(pid string) (memStatus, error) {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return memStatus{}, err
	}
	return parseStatus(b)
}

func readHostCPU() (hostCPU, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return hostCPU{}, err
	}
	return parseHostStat(b)
}

// clockTicksPerSecond returns USER_HZ, the unit of the /proc CPU times. The
// standard library has no sysconf, so ask `getconf CLK_TCK`; if that is not
// available fall back to 100, which is what Linux reports on every mainstream
// architecture (USER_HZ is fixed at 100 for the user ABI).
func clockTicksPerSecond() (hz int64, source string) {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err == nil && n > 0 {
			return n, "getconf CLK_TCK"
		}
	}
	return 100, "assumed (getconf unavailable)"
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
