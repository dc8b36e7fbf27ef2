package checker

import (
	"cmp"
	"slices"
	"time"
)

// Unknown is an RTO duration that could not be measured.
const Unknown time.Duration = -1

// RTO is how long writes stopped around a fault, as the client saw it.
type RTO struct {
	// Outage is the longest time between two consecutive acknowledged
	// writes (by acknowledgement time, all writers together) from the last
	// one at or before the fault (the fault itself when there is none) up
	// to the first one by a server on a newer timeline (or the last one when
	// no server on a newer timeline acknowledged: the fault needed no
	// failover). Unknown without a fault or with no write acknowledged after
	// it. This is rto-seconds.
	Outage time.Duration
	// NewTimeline is the time from the fault to the first write acknowledged
	// by a server on a newer timeline than the last acknowledgement at or
	// before the fault. Unknown without a fault, without an acknowledgement
	// before it, or with none on a newer timeline after it.
	NewTimeline time.Duration
}

// MeasureRTO measures the RTO of a fault injected at fault from the
// attempts' acknowledgements.
func MeasureRTO(attempts []Attempt, fault time.Time) RTO {
	r := RTO{Outage: Unknown, NewTimeline: Unknown}
	if fault.IsZero() {
		return r
	}
	var acks []Ack
	for _, a := range attempts {
		if ack, ok := a.Ack(); ok {
			acks = append(acks, ack)
		}
	}
	slices.SortStableFunc(acks, func(a, b Ack) int { return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.ID, b.ID)) })
	after, _ := slices.BinarySearchFunc(acks, fault, func(a Ack, t time.Time) int {
		if a.At.After(t) {
			return 1
		}
		return -1
	})
	prev, timeline := fault, 0 // timeline 0: no acknowledgement before the fault
	if after > 0 {
		prev, timeline = acks[after-1].At, acks[after-1].Server.Timeline
	}
	for _, a := range acks[after:] {
		r.Outage = max(r.Outage, a.At.Sub(prev))
		prev = a.At
		if timeline > 0 && a.Server.Timeline > timeline {
			r.NewTimeline = a.At.Sub(fault)
			break
		}
	}
	return r
}
