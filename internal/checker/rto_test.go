package checker

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestMeasureRTO(t *testing.T) {
	// Acknowledgements on timeline 1 every second up to 10 s.
	var before []Attempt
	for s := 1; s <= 10; s++ {
		before = append(before, acked(int64(s), float64(s), old))
	}
	with := func(a ...Attempt) []Attempt { return append(append([]Attempt(nil), before...), a...) }
	cases := map[string]struct {
		reason   string
		attempts []Attempt
		fault    time.Time
		want     RTO
	}{
		"NoFault": {
			reason:   "without a fault nothing is measured",
			attempts: with(acked(11, 40, promoted)),
			want:     RTO{Outage: Unknown, NewTimeline: Unknown},
		},
		"Failover": {
			reason:   "the gap from the last acknowledgement before the fault to the first on timeline 2; the fault to that one",
			attempts: with(failed(11, 11), timedOut(12, 17), acked(13, 40, promoted), acked(14, 41, promoted)),
			fault:    at(10.5),
			want:     RTO{Outage: 30 * time.Second, NewTimeline: 29500 * time.Millisecond},
		},
		"OldPrimaryGoesOn": {
			reason:   "acknowledgements by the old primary after the fault shorten the outage, not the time to the new timeline",
			attempts: with(acked(11, 11, old), acked(12, 12, old), acked(13, 40, promoted)),
			fault:    at(10.5),
			want:     RTO{Outage: 28 * time.Second, NewTimeline: 29500 * time.Millisecond},
		},
		"LaterGapsIgnored": {
			reason:   "a gap after the first acknowledgement on the new timeline is another story",
			attempts: with(acked(11, 40, promoted), acked(12, 100, promoted)),
			fault:    at(10.5),
			want:     RTO{Outage: 30 * time.Second, NewTimeline: 29500 * time.Millisecond},
		},
		"LongestGapBeforeNewTimeline": {
			reason:   "the longest gap of the window, not the last",
			attempts: with(acked(11, 30, old), acked(12, 31, promoted)),
			fault:    at(10.5),
			want:     RTO{Outage: 20 * time.Second, NewTimeline: 20500 * time.Millisecond},
		},
		"NoFailover": {
			reason:   "the primary came back (no failover needed): the outage still counts, there is no new timeline",
			attempts: with(acked(11, 25, old), acked(12, 26, old), acked(13, 60, old)),
			fault:    at(10.5),
			want:     RTO{Outage: 34 * time.Second, NewTimeline: Unknown},
		},
		"NeverResumed": {
			reason:   "no acknowledgement after the fault: unknown",
			attempts: with(failed(11, 11), timedOut(12, 20)),
			fault:    at(10.5),
			want:     RTO{Outage: Unknown, NewTimeline: Unknown},
		},
		"NothingBefore": {
			reason:   "no acknowledgement before the fault: the outage counts from the fault, the old timeline is unknown",
			attempts: []Attempt{failed(1, 1), acked(2, 20, promoted)},
			fault:    at(0.5),
			want:     RTO{Outage: 19500 * time.Millisecond, NewTimeline: Unknown},
		},
		"AckAtTheFault": {
			reason:   "an acknowledgement at the very time of the fault is before it",
			attempts: []Attempt{acked(1, 5, old), acked(2, 10, old), acked(3, 15, promoted)},
			fault:    at(10),
			want:     RTO{Outage: 5 * time.Second, NewTimeline: 5 * time.Second},
		},
		"ConcurrentWriters": {
			reason:   "writers' acknowledgements interleave: ordered by time, not id",
			attempts: []Attempt{acked(4, 9.5, old), acked(1, 10, old), acked(3, 35, promoted), acked(2, 33, promoted), acked(5, 9, old)},
			fault:    at(10.2),
			want:     RTO{Outage: 23 * time.Second, NewTimeline: 22800 * time.Millisecond},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, MeasureRTO(tc.attempts, tc.fault)); diff != "" {
				t.Errorf("%s\nMeasureRTO: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
