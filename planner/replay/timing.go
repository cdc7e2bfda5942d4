package replay

import (
	"math"
	"time"
)

// Clock converts between trace seconds and real time: trace second 0 is
// real instant T0, and one real second stands for Scale trace seconds.
type Clock struct {
	T0    time.Time
	Scale float64
}

// At is the real instant of trace second s.
func (c Clock) At(s float64) time.Time {
	return c.T0.Add(time.Duration(s / c.Scale * float64(time.Second)))
}

// Trace is real instant t in trace seconds; NaN for the zero time, which
// stands for "never".
func (c Clock) Trace(t time.Time) float64 {
	if t.IsZero() {
		return math.NaN()
	}
	return t.Sub(c.T0).Seconds() * c.Scale
}

// Span is a real duration in trace seconds.
func (c Clock) Span(d time.Duration) float64 { return d.Seconds() * c.Scale }
