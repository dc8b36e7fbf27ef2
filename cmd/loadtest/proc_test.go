package main

import (
	"os"
	"strconv"
	"testing"
)

func TestCPUTicks(t *testing.T) {
	cases := []struct {
		name    string
		stat    string
		want    uint64
		wantErr bool
	}{
		{
			name: "ordinary",
			// pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
			stat: "4242 (function-databa) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 37 0 0 20 0 9 0 100 1000000 9000 18446744073709551615\n",
			want: 287,
		},
		{
			name: "comm with spaces and parentheses",
			stat: "77 (a) b (c) R 1 77 77 0 -1 0 0 0 0 0 11 22 0 0 20 0 1 0 5 0 0\n",
			want: 33,
		},
		{
			name: "zero",
			stat: "1 (init) S 0 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 1 0 0",
			want: 0,
		},
		{name: "no comm", stat: "1 init S 0 1 1 0 -1 0 0 0 0 0 1 2", wantErr: true},
		{name: "truncated", stat: "1 (init) S 0 1 1 0 -1 0 0 0 0 0 1", wantErr: true},
		{name: "not a number", stat: "1 (init) S 0 1 1 0 -1 0 0 0 0 0 x 2 0", wantErr: true},
		{name: "empty", stat: "", wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := cpuTicks([]byte(tc.stat))
			if (err != nil) != tc.wantErr {
				t.Fatalf("cpuTicks() error = %v, wantErr %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("cpuTicks() = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestParseStatus(t *testing.T) {
	const real = "Name:\tfunction-databa\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\n" +
		"VmPeak:\t 1262148 kB\nVmSize:\t 1262148 kB\nVmLck:\t       0 kB\nVmPin:\t       0 kB\n" +
		"VmHWM:\t   41088 kB\nVmRSS:\t   39936 kB\nRssAnon:\t   20480 kB\nThreads:\t9\n"
	cases := []struct {
		name    string
		status  string
		want    memStatus
		wantErr bool
	}{
		{"real layout", real, memStatus{RSS: 39936 << 10, HWM: 41088 << 10}, false},
		{"order does not matter", "VmRSS: 1 kB\nVmHWM: 2 kB\n", memStatus{RSS: 1024, HWM: 2048}, false},
		{"zombie has no Vm lines", "Name:\tx\nState:\tZ (zombie)\n", memStatus{}, true},
		{"only one line", "VmHWM: 2 kB\n", memStatus{HWM: 2048}, true},
		{"bad unit", "VmHWM: 2 MB\nVmRSS: 1 kB\n", memStatus{}, true},
		{"bad number", "VmHWM: x kB\nVmRSS: 1 kB\n", memStatus{}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStatus([]byte(tc.status))
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseStatus() error = %v, wantErr %v", err, tc.wantErr)
			}
			if !tc.wantErr && got != tc.want {
				t.Errorf("parseStatus() = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseHostStat(t *testing.T) {
	cases := []struct {
		name    string
		stat    string
		want    hostCPU
		wantErr bool
	}{
		{
			name: "full line",
			//         user nice system idle iowait irq softirq steal guest guest_nice
			stat: "cpu  100 5 50 1000 20 3 2 1 40 0\ncpu0 50 2 25 500 10 1 1 0 20 0\nintr 1\n",
			want: hostCPU{Busy: 100 + 5 + 50 + 3 + 2 + 1, Total: 100 + 5 + 50 + 3 + 2 + 1 + 1000 + 20},
		},
		{
			name: "old kernel, four fields",
			stat: "cpu 10 0 5 85\n",
			want: hostCPU{Busy: 15, Total: 100},
		},
		{name: "per-cpu line first", stat: "cpu0 1 2 3 4 5\n", wantErr: true},
		{name: "too short", stat: "cpu 1 2\n", wantErr: true},
		{name: "garbage", stat: "cpu a b c d e\n", wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseHostStat([]byte(tc.stat))
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseHostStat() error = %v, wantErr %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("parseHostStat() = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// The parsers against this machine's /proc: a smoke test that the layouts
// assumed above are the kernel's.
func TestLiveProc(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	pid := strconv.Itoa(os.Getpid())
	if _, err := readCPUTicks(pid); err != nil {
		t.Errorf("readCPUTicks(self): %v", err)
	}
	m, err := readStatus(pid)
	if err != nil {
		t.Fatalf("readStatus(self): %v", err)
	}
	if m.RSS == 0 || m.HWM < m.RSS {
		t.Errorf("readStatus(self) = %+v, want 0 < RSS <= HWM", m)
	}
	h, err := readHostCPU()
	if err != nil {
		t.Fatalf("readHostCPU(): %v", err)
	}
	if h.Total == 0 || h.Busy > h.Total {
		t.Errorf("readHostCPU() = %+v", h)
	}
	if hz, _ := clockTicksPerSecond(); hz <= 0 {
		t.Errorf("clockTicksPerSecond() = %d", hz)
	}
}
