package main

import (
	"slices"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond // 1..100 ms
	}
	cases := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 50, 0},
		{"single p50", ms(7), 50, 7 * time.Millisecond},
		{"single p99", ms(7), 99, 7 * time.Millisecond},
		{"two p50 is the lower (nearest rank)", ms(1, 2), 50, 1 * time.Millisecond},
		{"two p51", ms(1, 2), 51, 2 * time.Millisecond},
		{"odd p50 is the middle", ms(1, 2, 3, 4, 5), 50, 3 * time.Millisecond},
		{"1..100 p50", hundred, 50, 50 * time.Millisecond},
		{"1..100 p99", hundred, 99, 99 * time.Millisecond},
		{"1..100 p99.9", hundred, 99.9, 100 * time.Millisecond},
		{"1..100 p100", hundred, 100, 100 * time.Millisecond},
		{"p0 is the minimum", ms(3, 4), 0, 3 * time.Millisecond},
		{"p above 100 clamps to the maximum", ms(3, 4), 150, 4 * time.Millisecond},
		{"outlier sets p99 of 10", ms(1, 1, 1, 1, 1, 1, 1, 1, 1, 900), 99, 900 * time.Millisecond},
		{"outlier does not set p50", ms(1, 1, 1, 1, 1, 1, 1, 1, 1, 900), 50, 1 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := percentile(tc.sorted, tc.p); got != tc.want {
				t.Errorf("percentile(%v, %v) = %v, want %v", tc.sorted, tc.p, got, tc.want)
			}
		})
	}
}

func TestMergeSorted(t *testing.T) {
	cases := []struct {
		name  string
		parts [][]time.Duration
		want  []time.Duration
	}{
		{"none", nil, []time.Duration{}},
		{"one empty worker", [][]time.Duration{{}, {2, 1}}, []time.Duration{1, 2}},
		{"interleaved", [][]time.Duration{{5, 1, 3}, {4, 2}, {6}}, []time.Duration{1, 2, 3, 4, 5, 6}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := mergeSorted(tc.parts); !slices.Equal(got, tc.want) {
				t.Errorf("mergeSorted(%v) = %v, want %v", tc.parts, got, tc.want)
			}
		})
	}
}

func TestMedian(t *testing.T) {
	cases := []struct {
		name string
		in   []float64
		want float64
	}{
		{"empty", nil, 0},
		{"one", []float64{3}, 3},
		{"two is the mean", []float64{4, 2}, 3},
		{"odd unsorted", []float64{9, 1, 5}, 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.in)
			if got := median(in); got != tc.want {
				t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
			}
			if !slices.Equal(in, tc.in) {
				t.Errorf("median modified its input: %v", in)
			}
		})
	}
}

func TestParseIntList(t *testing.T) {
	cases := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{"1,8", []int{1, 8}, false},
		{" 1 , 8 ,", []int{1, 8}, false},
		{"4", []int{4}, false},
		{"", nil, true},
		{"0", nil, true},
		{"1,x", nil, true},
		{"-2", nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseIntList(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseIntList(%q) error = %v, wantErr %v", tc.in, err, tc.wantErr)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("parseIntList(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestLeakVerdict(t *testing.T) {
	mk := func(rssMiB ...uint64) []sample {
		s := make([]sample, len(rssMiB))
		for i, r := range rssMiB {
			s[i] = sample{Completed: int64(i+1) * 100000, Mem: memStatus{RSS: r << 20, HWM: r << 20}}
		}
		return s
	}
	cases := []struct {
		name    string
		samples []sample
		prefix  string
	}{
		{"too few", mk(40, 41, 42), "Too few samples"},
		{"flat with noise (first sample ignored)", mk(30, 40, 41, 39, 40, 41), "RSS flat"},
		{"growing", mk(40, 40, 50, 60, 70, 80, 90), "RSS **growing**"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := leakVerdict(tc.samples)
			if len(got) < len(tc.prefix) || got[:len(tc.prefix)] != tc.prefix {
				t.Errorf("leakVerdict() = %q, want prefix %q", got, tc.prefix)
			}
		})
	}
}
