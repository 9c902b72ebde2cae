package console

import (
	"fmt"
	"html/template"
	"math"
	"strings"
	"time"
)

// span says how much time the chart covers.
func span(h []Sample) string {
	if len(h) < 2 {
		return "no history yet"
	}
	return "the last " + age(h[len(h)-1].At.Sub(h[0].At).Seconds())
}

// The chart's geometry, in the SVG's user units (app.js draws the same):
// the plot area is [chartLeft, chartRight] × [chartTop, chartBottom], with
// the rows axis on its left and the time axis under it.
const (
	chartW, chartH           = 960.0, 220.0
	chartLeft, chartRight    = 64.0, chartW - 16
	chartTop, chartBottom    = 12.0, chartH - 44
	chartXTicks              = 5
	chartTimeLayout          = "15:04:05"
	chartYTitle, chartXTitle = "rows", "time (UTC)"
)

// niceCeil is the smallest of 1, 2 and 5 times a power of ten that is at
// least n (n ≥ 1).
func niceCeil(n int64) int64 {
	for p := int64(1); ; p *= 10 {
		for _, m := range []int64{1, 2, 5} {
			if m*p >= n {
				return m * p
			}
		}
	}
}

// yScale is the rows axis for a largest value of top: a round step and the
// axis's top, a whole number of steps (at most five ticks above 0).
func yScale(top int64) (step, axisTop int64) {
	step = niceCeil(max(1, (top+3)/4))
	return step, max(step, (top+step-1)/step*step)
}

// chart draws the backlog history as an inline SVG: pending and parked
// rows over time, on a rows axis and a time axis with their tick labels
// (the page's script redraws it from /api/v1/stats).
func chart(h []Sample) template.HTML {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg id="backlog-chart" viewBox="0 0 %d %d" role="img" aria-label="Backlog over time">`, int(chartW), int(chartH))
	if len(h) < 2 {
		b.WriteString(`<text x="10" y="90" class="muted">collecting samples…</text></svg>`)
		return template.HTML(b.String())
	}
	var most int64
	for _, s := range h {
		most = max(most, s.Pending+s.InFlight, s.Parked)
	}
	step, top := yScale(most)
	t0, t1 := h[0].At, h[len(h)-1].At
	xOf := func(i int, at time.Time) float64 {
		f := float64(i) / float64(len(h)-1)
		if d := t1.Sub(t0); d > 0 {
			f = float64(at.Sub(t0)) / float64(d)
		}
		return chartLeft + (chartRight-chartLeft)*f
	}
	yOf := func(v int64) float64 {
		return math.Max(chartTop, chartBottom-(chartBottom-chartTop)*float64(v)/float64(top))
	}
	// The rows axis: a line, a tick, a grid line and a label per step.
	fmt.Fprintf(&b, `<g class="axis axis-y"><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, chartLeft, chartTop, chartLeft, chartBottom)
	for v := int64(0); v <= top; v += step {
		y := yOf(v)
		fmt.Fprintf(&b, `<line class="grid" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/><text class="tick" x="%.1f" y="%.1f" text-anchor="end">%s</text>`,
			chartLeft, y, chartRight, y, chartLeft-6, y+4, num(v))
	}
	fmt.Fprintf(&b, `<text class="axis-title" transform="translate(14 %.1f) rotate(-90)" text-anchor="middle">%s</text></g>`,
		(chartTop+chartBottom)/2, chartYTitle)
	// The time axis: ticks spread evenly over the history, labelled with
	// the time (UTC) at each.
	fmt.Fprintf(&b, `<g class="axis axis-x"><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, chartLeft, chartBottom, chartRight, chartBottom)
	for i := range chartXTicks {
		f := float64(i) / float64(chartXTicks-1)
		x := chartLeft + (chartRight-chartLeft)*f
		at := t0.Add(time.Duration(f * float64(t1.Sub(t0))))
		anchor := "middle"
		if i == 0 {
			anchor = "start"
		} else if i == chartXTicks-1 {
			anchor = "end"
		}
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/><text class="tick" x="%.1f" y="%.1f" text-anchor="%s">%s</text>`,
			x, chartBottom, x, chartBottom+5, x, chartBottom+18, anchor, at.UTC().Format(chartTimeLayout))
	}
	fmt.Fprintf(&b, `<text class="axis-title" x="%.1f" y="%.1f" text-anchor="middle">%s</text></g>`, (chartLeft+chartRight)/2, chartH-6, chartXTitle)
	line := func(val func(Sample) int64) string {
		pts := make([]string, len(h))
		for i, s := range h {
			pts[i] = fmt.Sprintf("%.1f,%.1f", xOf(i, s.At), yOf(val(s)))
		}
		return strings.Join(pts, " ")
	}
	fmt.Fprintf(&b, `<polyline class="l-backlog" points="%s"/>`, line(func(s Sample) int64 { return s.Pending + s.InFlight }))
	fmt.Fprintf(&b, `<polyline class="l-parked" points="%s"/>`, line(func(s Sample) int64 { return s.Parked }))
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
